import type { RequestHandler } from 'express';
import { ApiError, clip } from '@tserve/contract';

/**
 * ROOT_PATH: every route served under a path prefix, for an ingress that forwards the path as it
 * is. A request under it goes on as if the prefix were not there (its `originalUrl` keeps it, for
 * the pages that write their own addresses); any other is a 404, health routes included.
 */
export function underRootPath(root: string): RequestHandler {
  return (req, _res, next) => {
    const { url } = req;
    const rest = url.startsWith(root) ? url.slice(root.length) : undefined;
    if (rest === '' || rest?.startsWith('/')) req.url = rest || '/';
    else if (rest?.startsWith('?')) req.url = `/${rest}`;
    else
      return next(
        new ApiError(
          'not_found',
          `no route for ${clip(req.method)} ${clip(req.path)}: every route is under ${root} (ROOT_PATH)`,
        ),
      );
    next();
  };
}
