import { InitialSchema1764460000000 } from './1764460000000-initial-schema';
import { SweepLog1764460100000 } from './1764460100000-sweep-log';
import { ObservationDue1764460400000 } from './1764460400000-observation-due';
import { ConnectorSettings1764460600000 } from './1764460600000-connector-settings';
import { EventsSignalAfterCommit1764470000000 } from './1764470000000-events-signal-after-commit';
import { IdempotencyClaimToken1764470100000 } from './1764470100000-idempotency-claim-token';
import { OperatorKeys1764480000000 } from './1764480000000-operator-keys';
import { ExecutionOutcome1764490000000 } from './1764490000000-execution-outcome';
import { IdempotencyExpiryIndex1764500000000 } from './1764500000000-idempotency-expiry-index';
import { IdempotencyRoute1764700000000 } from './1764700000000-idempotency-route';
import { ReadBacksBoundAfterCapLock1764710000000 } from './1764710000000-read-backs-bound-after-cap-lock';
import { RetryChainLocked1764716000000 } from './1764716000000-retry-chain-locked';
import { RetryChainLockedLinear1764721800000 } from './1764721800000-retry-chain-locked-linear';
import { RecheckRequests1764717000000 } from './1764717000000-recheck-requests';
import { RecheckRequestLifetime1764718000000 } from './1764718000000-recheck-request-lifetime';
import { RecheckRequestPruneIndexes1764719000000 } from './1764719000000-recheck-request-prune-indexes';
import { CapAmountFunction1764721300000 } from './1764721300000-cap-amount-function';
import { SpendBackfillIndex1764721400000 } from './1764721400000-spend-backfill-index';
import { CapAmountBoundedDigits1764721500000 } from './1764721500000-cap-amount-bounded-digits';
import { WebhookSendsInFlight1764721600000 } from './1764721600000-webhook-sends-in-flight';
import { WebhookSendsInFlightTenant1764721700000 } from './1764721700000-webhook-sends-in-flight-tenant';
import { Webhooks1764510000000 } from './1764510000000-webhooks';
import { ExecutionTrace1764520300000 } from './1764520300000-execution-trace';
import { HotUpdates1764530000000 } from './1764530000000-hot-updates';
import { AdminChanges1764540000000 } from './1764540000000-admin-changes';
import { WebhookAfterFailed1764550000000 } from './1764550000000-webhook-after-failed';
import { ReadBackBinding1764551000000 } from './1764551000000-read-back-binding';
import { AdminChangesWebhooks1764560000000 } from './1764560000000-admin-changes-webhooks';
import { AdminChangesOrder1764570000000 } from './1764570000000-admin-changes-order';
import { AllowHostsSecrets1764580000000 } from './1764580000000-allow-hosts-secrets';
import { SettingsVersionAfterCapLock1764590000000 } from './1764590000000-settings-version-after-cap-lock';
import { PendingOutcomeIndex1764600000000 } from './1764600000000-pending-outcome-index';
import { WebhookLateAcknowledgement1764610000000 } from './1764610000000-webhook-late-acknowledgement';
import { PendingVerdictIndex1764620000000 } from './1764620000000-pending-verdict-index';
import { EffectShownAfterFailed1764630000000 } from './1764630000000-effect-shown-after-failed';
import { UnevaluatedEndedIndex1764640000000 } from './1764640000000-unevaluated-ended-index';
import { LateRejection1764650000000 } from './1764650000000-late-rejection';
import { WebhookLateRejection1764660000000 } from './1764660000000-webhook-late-rejection';
import { ResendReference1764670000000 } from './1764670000000-resend-reference';
import { WebhookDisabledGap1764680000000 } from './1764680000000-webhook-disabled-gap';
import { WebhookDeliveryRetention1764690000000 } from './1764690000000-webhook-delivery-retention';

/** In order. Add a new timestamped class for every schema change; never change what one that has shipped runs. */
export const MIGRATIONS = [
  InitialSchema1764460000000,
  SweepLog1764460100000,
  ObservationDue1764460400000,
  ConnectorSettings1764460600000,
  EventsSignalAfterCommit1764470000000,
  IdempotencyClaimToken1764470100000,
  OperatorKeys1764480000000,
  ExecutionOutcome1764490000000,
  IdempotencyExpiryIndex1764500000000,
  Webhooks1764510000000,
  ExecutionTrace1764520300000,
  HotUpdates1764530000000,
  AdminChanges1764540000000,
  WebhookAfterFailed1764550000000,
  ReadBackBinding1764551000000,
  AdminChangesWebhooks1764560000000,
  AdminChangesOrder1764570000000,
  AllowHostsSecrets1764580000000,
  SettingsVersionAfterCapLock1764590000000,
  PendingOutcomeIndex1764600000000,
  WebhookLateAcknowledgement1764610000000,
  PendingVerdictIndex1764620000000,
  EffectShownAfterFailed1764630000000,
  UnevaluatedEndedIndex1764640000000,
  LateRejection1764650000000,
  WebhookLateRejection1764660000000,
  ResendReference1764670000000,
  WebhookDisabledGap1764680000000,
  WebhookDeliveryRetention1764690000000,
  IdempotencyRoute1764700000000,
  ReadBacksBoundAfterCapLock1764710000000,
  RetryChainLocked1764716000000,
  RecheckRequests1764717000000,
  RecheckRequestLifetime1764718000000,
  RecheckRequestPruneIndexes1764719000000,
  CapAmountFunction1764721300000,
  SpendBackfillIndex1764721400000,
  CapAmountBoundedDigits1764721500000,
  WebhookSendsInFlight1764721600000,
  WebhookSendsInFlightTenant1764721700000,
  RetryChainLockedLinear1764721800000,
];
