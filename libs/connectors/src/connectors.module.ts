import { Global, Module } from '@nestjs/common';
import { ConnectorRegistry } from './registry';
import { TenantConnectors } from './tenant-connectors';

/** The built-in connectors, and the tenant's view of them, for every app that calls or describes a connector. */
@Global()
@Module({
  // A factory: each app gets its own registry, also where several apps share one process (the tests).
  providers: [{ provide: ConnectorRegistry, useFactory: () => new ConnectorRegistry() }, TenantConnectors],
  exports: [ConnectorRegistry, TenantConnectors],
})
export class ConnectorsModule {}
