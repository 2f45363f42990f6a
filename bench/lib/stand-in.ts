/**
 * The floors' stand-ins (path-floor.ts, shed-floor.ts), each a process of its own:
 * `stand-in.ts <role> <arguments…>`, started by `startStandIn`.
 */
import { runPathStandIn, type PathRole } from './path-floor.ts';
import { runShedStandIn } from './shed-floor.ts';

const [role, ...args] = process.argv.slice(2);
if (role === 'refuse' || role === 'burn') await runShedStandIn(role, args);
else await runPathStandIn(role as PathRole, args);
