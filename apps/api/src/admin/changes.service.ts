import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { AdminChangeRow, listAdminChanges } from '@verity/persistence';
import { DataSource } from 'typeorm';
import type { Principal } from '../auth/principal';
import type { ChangeListOf, ChangeViewOf, ChangesQueryOf } from './changes.schema';
import { pageOf } from '../http/parse';

function changeView(row: AdminChangeRow): ChangeViewOf {
  return {
    id: row.id,
    kind: row.kind,
    connector: row.connector,
    by: row.changed_by,
    at: new Date(row.changed_at).toISOString(),
    before: row.before,
    after: row.after,
  } as ChangeViewOf;
}

/**
 * The tenant's history of admin changes (admin role): every write of its policy and of a connector's settings, with
 * who, when, and the settings before and after. Written by the changes themselves (libs/persistence); read here.
 */
@Injectable()
export class ChangesService {
  constructor(@InjectDataSource() private readonly db: DataSource) {}

  async list(principal: Principal, query: ChangesQueryOf): Promise<ChangeListOf> {
    const found = await listAdminChanges(this.db.manager, {
      tenantId: principal.tenantId,
      before: query.cursor,
      kind: query.kind,
      connector: query.connector,
      limit: query.limit + 1,
    });
    const { page, nextCursor } = pageOf(found, query.limit);
    return { data: page.map(changeView), next_cursor: nextCursor };
  }
}
