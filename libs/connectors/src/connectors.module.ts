import { Global, Module } from '@nestjs/common';
import { ConnectorRegistry } from './registry';
import { TenantConnectors } from './tenant-connectors';
import { TenantSecretsCache } from './tenant-secrets-cache';

/** The built-in connectors, and the tenant's view of them, for every app that calls or describes a connector. */
@Global()
@Module({
  // A factory: each app gets its own registry, also where several apps share one process (the tests).
  providers: [
    { provide: ConnectorRegistry, useFactory: () => new ConnectorRegistry() },
    TenantConnectors,
    // Kept only where a LISTEN connection says it may be (the API's EventNotifier): a worker's is never used.
    TenantSecretsCache,
  ],
  exports: [ConnectorRegistry, TenantConnectors, TenantSecretsCache],
})
export class ConnectorsModule {}
