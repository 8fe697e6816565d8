import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { SchemaNotMigratedError, schemaMigratedProbe } from '@verity/persistence';
import { LOGGER, Logger } from '@verity/platform';

/**
 * Whether the schema this code needs is there, for the reconciler's own periodic work (the sweep, the overdue sweep
 * check, the webhook outbox pass). A reconciler started before the migrations ran (its readiness answers 503
 * `schema: down`) ran them anyway and warned of a missing table on every sweep and every overdue check, for as long
 * as the migrations took. Now that work waits: one line when the waiting starts, one when it ends. Any other failure
 * (Postgres down) is thrown to the caller, as before.
 */
@Injectable()
export class SchemaGate {
  /** Asks until it has once seen the schema migrated; free after that. */
  private readonly probe: () => Promise<void>;
  private waiting = false;

  constructor(
    @InjectDataSource() db: DataSource,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.probe = schemaMigratedProbe(db.manager);
  }

  async open(): Promise<boolean> {
    try {
      await this.probe();
    } catch (error) {
      if (!(error instanceof SchemaNotMigratedError)) throw error;
      if (!this.waiting) {
        this.waiting = true;
        this.logger.warn(
          { migration: error.migration },
          'the database schema is not migrated: sweeps and webhook passes wait until the migrations have run',
        );
      }
      return false;
    }
    if (this.waiting) {
      this.waiting = false;
      this.logger.info('the database schema is migrated: sweeps and webhook passes run');
    }
    return true;
  }
}
