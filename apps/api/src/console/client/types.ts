/**
 * The wire shapes the console reads (snake_case, as the API sends them): the types generated from the API's OpenAPI
 * document (see libs/sdk/src/generated), never a copy. A type-only import: nothing of the SDK reaches the browser
 * bundle (tsc erases it, and the bundle loads only this directory's files).
 */
import type { WireSchemas } from '@verity/sdk';

export type Operation = WireSchemas['Operation'];
export type Approval = NonNullable<Operation['approval']>;
export type Obligation = NonNullable<Operation['recovery_obligation']>;
export type Resolution = NonNullable<Obligation['resolution']>;
export type OperationDetail = WireSchemas['OperationDetail'];
export type Execution = WireSchemas['Execution'];
export type CriterionResult = NonNullable<Execution['criteria_results']>[number];
export type QueuePage = WireSchemas['ReviewQueue'];
export type QueueItem = QueuePage['data'][number];
export type ExecutionSummary = NonNullable<QueueItem['execution']>;
export type ReviewCounts = WireSchemas['ReviewSummary'];
export type TimelineEvent = WireSchemas['Event'];
export type StatusModel = WireSchemas['StatusModel'];
export type ConnectorInfo = WireSchemas['ConnectorList']['data'][number];
