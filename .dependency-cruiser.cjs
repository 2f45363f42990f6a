// The layering rule: apps are leaves that may import packages/*, never each other; packages never
// import apps; BullMQ stays behind each app's transport/; and no module imports itself back through others.
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'app-imports-app',
      comment: 'An app imports another app; share the code through a package under packages/.',
      severity: 'error',
      from: { path: '^apps/([^/]+)/' },
      to: { path: '^apps/', pathNot: '^apps/$1/' },
    },
    {
      name: 'package-imports-app',
      comment: 'A package imports an app; packages are what apps are built from, never the reverse.',
      severity: 'error',
      from: { path: '^packages/' },
      to: { path: '^apps/' },
    },
    {
      name: 'bullmq-outside-transport',
      comment: "BullMQ is imported outside an app's transport/ folder; the transport is the one module on it (docs/protocol.md): add what you need to its API.",
      severity: 'error',
      from: { path: '^(apps|packages)/[^/]+/src/', pathNot: '^apps/[^/]+/src/transport/' },
      to: { path: 'node_modules/bullmq/' },
    },
    {
      name: 'no-cycle',
      comment: 'An import cycle; break it by moving what both sides need into a module of its own.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'unresolvable',
      comment: 'An import that resolves to nothing (a rule above cannot judge what it cannot find).',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    // Build output is a leaf: an import of @tserve/<app> lands in apps/<app>/dist and is judged there.
    doNotFollow: { path: ['node_modules', '(^|/)dist/'] },
    // Workspace packages resolve to their sources (tsconfig.eslint.json's paths), so the check
    // needs no build.
    tsConfig: { fileName: 'tsconfig.eslint.json' },
    tsPreCompilationDeps: true,
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default', 'types'] },
  },
};
