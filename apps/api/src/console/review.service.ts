import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  ExecutionEntity,
  ReviewQueue,
  reviewQueueCounts,
  reviewQueuePage,
  reviewQueuePageWithSecretsHeld,
} from '@verity/persistence';
import { ConnectorRegistry, TenantConnectors } from '@verity/connectors';
import { TerminalReason } from '@verity/status-model';
import { DataSource, EntityManager } from 'typeorm';
import { AnswerHold, withAnswerBytes } from '../answer-bytes';
import type { Principal } from '../auth/principal';
import { pastDeadlineAt } from '../executions/approval-clock';
import { readForAnswer, readSnapshotForAnswer } from '../executions/execution-read';
import { presentOperation } from '../executions/presenter';
import { PAGE_BYTES } from '../http/parse';
import { ResolutionOptionsService } from '../operations/resolution-options.service';
import { Problem } from '../problem/problem';
import { maskSecrets } from './mask';

export type { ReviewQueue };

export interface QueueQuery {
  connector?: string;
  q?: string;
  reason?: TerminalReason;
  escalated?: boolean;
  cursor?: string;
  limit: number;
}

const iso = (d: Date) => new Date(d).toISOString();

/**
 * The two work queues of the review console. Both are read-only views over `operations`, tenant-scoped (I9), newest
 * first by id (ids are time-ordered, so the id is also a stable cursor). Each item carries the operation in the API's
 * wire shape and its execution next to it — two statuses, deliberately kept apart.
 */
@Injectable()
export class ReviewService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly holds: ResolutionOptionsService,
    private readonly connectors: ConnectorRegistry,
    private readonly tenantConnectors: TenantConnectors,
  ) {}

  /** Whether any operation of the connector waits in the queue, whatever else a query filters by. */
  private async anyHeldOf(
    db: EntityManager,
    tenantId: string,
    queue: ReviewQueue,
    connector: string,
  ): Promise<boolean> {
    return (await reviewQueuePage(db, tenantId, queue, { connector, limit: 1 })).total > 0;
  }

  /**
   * A page of a queue as of one moment: every read is made on one snapshot (readSnapshot). Read by statements of their
   * own, a cancel committed after the page's operations were read showed a hold beside its last move and options
   * judged from after that cancel.
   */
  async list(principal: Principal, queue: ReviewQueue, query: QueueQuery, hold: AnswerHold) {
    // The page's bytes (the stored text of its operations, known from the statement that cuts it) are held (the answer
    // budget) before it is presented, waiting their turn outside the snapshot when they must.
    return withAnswerBytes(hold, () => this.page(principal, queue, query, hold));
  }

  private page(principal: Principal, queue: ReviewQueue, query: QueueQuery, hold: AnswerHold) {
    // The page's first read tells whether the tenant holds any secret (readForAnswer).
    return readSnapshotForAnswer(this.db, this.tenantConnectors, async (db, secretsRead) => {
      const found = await readForAnswer(
        this.tenantConnectors,
        principal.tenantId,
        (held) =>
          reviewQueuePageWithSecretsHeld(db, principal.tenantId, queue, { ...query, maxBytes: PAGE_BYTES }, held),
        secretsRead,
      );
      if (
        query.connector !== undefined &&
        found.total === 0 &&
        !this.connectors.get(query.connector) &&
        !(await this.anyHeldOf(db, principal.tenantId, queue, query.connector))
      ) {
        // A misspelled name would list nothing, which a reviewer reads as "nothing of it waits". A name the registry no
        // longer has is still a filter while operations of it wait (a connector a later release removed), whatever the
        // other filters match.
        throw Problem.validation([
          {
            field: 'connector',
            rule: 'known_connector',
            message: `unknown connector "${query.connector}" (see GET /v1/connectors)`,
          },
        ]);
      }
      if (!hold.tryHold(found.bytes)) return { bytes: found.bytes };
      const page = found.operations;
      const byId = new Map(found.executions.map((e) => [e.id, e]));
      // The page's operations are not all of their executions': those a release depends on are read where needed.
      const { changes, judged, databaseNow, refuted, chains } = await this.holds.presentationInputs(
        principal.tenantId,
        page,
        { executions: found.executions },
        db,
      );
      const answer = {
        data: page.map((op) => ({
          operation: maskSecrets(
            presentOperation(
              op,
              changes.get(op.id) ?? null,
              judged.get(op.id)?.options,
              pastDeadlineAt(byId.get(op.executionId)?.deadlineAt, databaseNow),
              refuted.has(op.id),
              chains.get(op.id),
            ),
          ),
          execution: maskSecrets(this.summary(byId.get(op.executionId))),
        })),
        total: found.total,
        next_cursor: found.more ? page[page.length - 1].id : null,
      };
      return { answer };
    });
  }

  async counts(principal: Principal) {
    return {
      ...(await reviewQueueCounts(this.db.manager, principal.tenantId)),
      as_of: new Date().toISOString(),
      // The console offers decisions only to a key the API lets decide (ReviewerDecision): never an admin's.
      can_decide: principal.role === 'reviewer',
    };
  }

  private summary(execution: ExecutionEntity | undefined) {
    if (!execution) return null;
    return {
      id: execution.id,
      status: execution.status,
      agent_id: execution.agentId,
      intent: execution.intent,
      created_at: iso(execution.createdAt),
    };
  }
}
