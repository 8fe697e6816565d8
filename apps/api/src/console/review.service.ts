import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { ExecutionEntity, OperationEntity, findLastStatusChanges } from '@verity/persistence';
import { OperationStatus, TerminalReason } from '@verity/status-model';
import { DataSource, In, SelectQueryBuilder } from 'typeorm';
import type { Principal } from '../auth/principal';
import { presentOperation } from '../executions/presenter';
import { maskSecrets } from './client/mask';

export type ReviewQueue = 'approvals' | 'manual_reviews';

export interface QueueQuery {
  connector?: string;
  q?: string;
  reason?: TerminalReason;
  escalated?: boolean;
  cursor?: string;
  limit: number;
}

const iso = (d: Date) => new Date(d).toISOString();

/** `%` and `_` typed by a reviewer are literal characters, not wildcards. */
function likePattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/**
 * The two work queues of the review console. Both are read-only views over `operations`, tenant-scoped (I9), newest
 * first by id (ids are time-ordered, so the id is also a stable cursor). Each item carries the operation in the API's
 * wire shape and its execution next to it — two statuses, deliberately kept apart.
 */
@Injectable()
export class ReviewService {
  constructor(@InjectDataSource() private readonly db: DataSource) {}

  async list(principal: Principal, queue: ReviewQueue, query: QueueQuery) {
    const filtered = this.filtered(principal, queue, query);
    const total = await filtered.clone().getCount();
    const pageQuery = filtered
      .clone()
      .orderBy('o.id', 'DESC')
      .limit(query.limit + 1);
    if (query.cursor) pageQuery.andWhere('o.id < :cursor', { cursor: query.cursor });
    const found = await pageQuery.getMany();
    const page = found.slice(0, query.limit);
    const executions = page.length
      ? await this.db.getRepository(ExecutionEntity).findBy({
          id: In([...new Set(page.map((op) => op.executionId))]),
          tenantId: principal.tenantId,
        })
      : [];
    const byId = new Map(executions.map((e) => [e.id, e]));
    const changes = await findLastStatusChanges(
      this.db.manager,
      page.map((op) => op.id),
    );
    return {
      data: page.map((op) => ({
        operation: maskSecrets(presentOperation(op, changes.get(op.id) ?? null)),
        execution: maskSecrets(this.summary(byId.get(op.executionId))),
      })),
      total,
      next_cursor: found.length > query.limit ? page[page.length - 1].id : null,
    };
  }

  async counts(principal: Principal) {
    const [row] = (await this.db.query(
      `SELECT count(*) FILTER (WHERE status = 'PREPARED' AND approval->>'state' = 'requested') AS approvals,
              count(*) FILTER (WHERE status = 'MANUAL_REVIEW') AS manual_reviews,
              count(*) FILTER (WHERE status = 'MANUAL_REVIEW' AND obligation->>'escalated_at' IS NOT NULL) AS escalated,
              count(*) FILTER (WHERE status = 'MANUAL_REVIEW' AND (obligation->>'due_at')::timestamptz < now()) AS overdue
         FROM operations
        WHERE tenant_id = $1 AND status IN ('PREPARED', 'MANUAL_REVIEW')`,
      [principal.tenantId],
    )) as Record<'approvals' | 'manual_reviews' | 'escalated' | 'overdue', string>[];
    return {
      approvals: Number(row.approvals),
      manual_reviews: Number(row.manual_reviews),
      escalated: Number(row.escalated),
      overdue: Number(row.overdue),
      as_of: new Date().toISOString(),
    };
  }

  private filtered(principal: Principal, queue: ReviewQueue, query: QueueQuery): SelectQueryBuilder<OperationEntity> {
    const qb = this.db
      .getRepository(OperationEntity)
      .createQueryBuilder('o')
      .innerJoin(ExecutionEntity, 'e', 'e.id = o.execution_id AND e.tenant_id = o.tenant_id')
      .where('o.tenant_id = :tenantId', { tenantId: principal.tenantId });
    if (queue === 'approvals') {
      qb.andWhere('o.status = :status', { status: OperationStatus.PREPARED }).andWhere(
        `o.approval->>'state' = 'requested'`,
      );
    } else {
      qb.andWhere('o.status = :status', { status: OperationStatus.MANUAL_REVIEW });
      if (query.reason) qb.andWhere(`o.obligation->>'reason' = :reason`, { reason: query.reason });
      if (query.escalated !== undefined) {
        qb.andWhere(
          query.escalated ? `o.obligation->>'escalated_at' IS NOT NULL` : `o.obligation->>'escalated_at' IS NULL`,
        );
      }
    }
    if (query.connector) qb.andWhere('o.connector = :connector', { connector: query.connector });
    if (query.q) {
      // Params are not searched: a substring search over them would let anyone probe for a secret's value.
      qb.andWhere(
        `(o.id = :exact OR o.execution_id = :exact OR o.key ILIKE :like OR o.action ILIKE :like
          OR e.intent ILIKE :like OR e.agent_id ILIKE :like)`,
        { exact: query.q, like: likePattern(query.q) },
      );
    }
    return qb;
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
