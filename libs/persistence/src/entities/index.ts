import { ApiKeyEntity } from './api-key.entity';
import {
  ConnectorSpendEntity,
  TenantConnectorSecretEntity,
  TenantConnectorSettingsEntity,
} from './connector-settings.entity';
import { EventEntity } from './event.entity';
import { ExecutionEntity } from './execution.entity';
import { IdempotencyKeyEntity } from './idempotency-key.entity';
import { OperationEntity } from './operation.entity';
import { TenantEntity } from './tenant.entity';

export * from './api-key.entity';
export * from './connector-settings.entity';
export * from './event.entity';
export * from './execution.entity';
export * from './idempotency-key.entity';
export * from './operation.entity';
export * from './tenant.entity';

export const ENTITIES = [
  TenantEntity,
  ApiKeyEntity,
  ExecutionEntity,
  OperationEntity,
  EventEntity,
  IdempotencyKeyEntity,
  TenantConnectorSettingsEntity,
  TenantConnectorSecretEntity,
  ConnectorSpendEntity,
];
