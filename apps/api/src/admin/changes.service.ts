import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { ConnectorRegistry } from '@verity/connectors';
import { AdminChangeRow, listAdminChanges, listAdminChangesPage } from '@verity/persistence';
import { DataSource } from 'typeorm';
import type { Principal } from '../auth/principal';
import type { ChangeListOf, ChangeViewOf, ChangesQueryOf } from './changes.schema';
import { PAGE_BYTES } from '../http/parse';
import { Problem } from '../problem/problem';

function changeView(row: AdminChangeRow): ChangeViewOf {
  const view = {
    id: row.id,
    kind: row.kind,
    connector: row.connector,
    by: row.changed_by,
    at: new Date(row.changed_at).toISOString(),
    before: row.before,
    after: row.after,
  };
  if (row.kind !== 'webhook_endpoint') return view as ChangeViewOf;
  // The table has no column for it: the endpoint's id is in whichever side exists (both, for an enable).
  const endpoint = (row.after ?? row.before) as { id: string };
  return { ...view, endpoint_id: endpoint.id } as ChangeViewOf;
}

/**
 * The tenant's history of admin changes (admin role): every write of its policy, of a connector's settings and of a
 * webhook endpoint, with who, when, and the thing before and after. Written by the changes themselves
 * (libs/persistence); read here.
 */
@Injectable()
export class ChangesService {
  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly connectors: ConnectorRegistry,
  ) {}

  async list(principal: Principal, query: ChangesQueryOf): Promise<ChangeListOf> {
    if (query.connector !== undefined && !this.connectors.get(query.connector)) {
      // A name no connector has would list nothing, which reads as "no change was ever made" when it is a typo. Unless
      // this tenant's history holds changes of it: the log is append-only and outlives a connector a later release
      // removes, whose history must stay readable by its name.
      const held = await listAdminChanges(this.db.manager, {
        tenantId: principal.tenantId,
        connector: query.connector,
        limit: 1,
      });
      if (held.length === 0) {
        throw Problem.validation([
          {
            field: 'connector',
            rule: 'known_connector',
            message: `unknown connector "${query.connector}" (see GET /v1/connectors)`,
          },
        ]);
      }
    }
    const { rows: page, more } = await listAdminChangesPage(
      this.db.manager,
      {
        tenantId: principal.tenantId,
        before: query.cursor,
        kind: query.kind,
        connector: query.connector,
        limit: query.limit,
      },
      PAGE_BYTES,
    );
    return { data: page.map(changeView), next_cursor: more ? page[page.length - 1].id : null };
  }
}
