import { PersistenceModule } from '@verity/persistence';
import { Logger, PlatformModule, VerityConfig } from '@verity/platform';
import type { DataSource } from 'typeorm';
import { QueuesModule } from './queues.module';

/**
 * The modules every Verity app's root module imports (API, dispatcher, reconciler): its config and logger, its Postgres
 * pool and its job producer. `dataSource`: the one its main opened (openAppDataSource); `logger`: its main's
 * (startProcess). None in a test that builds the module alone.
 */
export function appModules(app: string, config: VerityConfig, dataSource?: DataSource, logger?: Logger) {
  return [PlatformModule.forRoot(app, config, logger), PersistenceModule.forRoot(dataSource), QueuesModule];
}
