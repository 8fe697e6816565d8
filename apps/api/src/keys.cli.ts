import 'reflect-metadata';
import { parseArgs } from 'node:util';
import {
  ApiKeyListing,
  KEY_ROLES,
  KeyOwner,
  KeyRole,
  Role,
  createApiKey,
  createDataSource,
  createTenant,
  isStatementTimeout,
  findActiveKeysByIdOrPrefix,
  listApiKeys,
  revokeApiKeyById,
  tenantExists,
} from '@verity/persistence';
import { escapeHiddenCharacters, jsonWithHiddenCharactersEscaped, loadConfig } from '@verity/platform';
import type { DataSource } from 'typeorm';
import { LABEL_MAX, isLabelText, shownLabel } from './key-label';

const USAGE = `Manage API keys (keys are stored hashed; a new key is printed once and never again).

  npm run keys -- create --tenant <id> --role <agent|reviewer|admin> [--new-tenant] [--label <text>] [--json]
  npm run keys -- create --role operator [--label <text>] [--json]
  npm run keys -- list [--tenant <id>] [--json]
  npm run keys -- revoke <key id or key prefix> [--json]
  npm run keys -- rotate --key <key id or key prefix> [--json]

A key for a tenant that does not exist yet needs --new-tenant, which makes the tenant (and is refused for one that
exists): a mistyped tenant makes no tenant of its own. rotate makes a new key of the same tenant, role and label and
revokes the old one, in one transaction.

An operator key belongs to no tenant: it opens Bull Board and /metrics (which show every tenant) and no tenant's
/v1 data.

The database is DATABASE_URL (default postgres://postgres@127.0.0.1:5432/verity).
A revoked key stops working at once in every API process, open streams included.`;

class UsageError extends Error {}

/**
 * An argument quoted back in a message, its control characters, escape sequences, bidi controls and invisible
 * characters escaped: a value pasted from elsewhere cannot clear the operator's screen, retitle the terminal or write
 * a line that reads as part of the answer.
 */
const shownArg = (text: string) => escapeHiddenCharacters(text);

/**
 * The exit code when a statement waited past DATABASE_QUERY_TIMEOUT_MS (a row it needs held by another session, a
 * database too slow to answer): the statement was rolled back, no key created or revoked. 75 is EX_TEMPFAIL: run it
 * again.
 */
export const TIMED_OUT_EXIT_CODE = 75;

/** A label as given, refused (usage error, nothing written) unless it is one line of plain text of at most 200. */
function labelOf(label: string | undefined): string | undefined {
  if (label === undefined) return undefined;
  if (!isLabelText(label)) {
    throw new UsageError(
      `--label is one line of text of at most ${LABEL_MAX} characters: no line breaks, control characters, bidi controls or invisible format characters`,
    );
  }
  return label;
}

type KeyRow = ApiKeyListing;

/**
 * A --json answer: a stored label's hidden characters (one stored before the label rule, or not by this CLI) as JSON
 * escapes, so the line parses to the same values and prints nothing a terminal acts on or hides.
 */
const jsonLine = (value: unknown) => jsonWithHiddenCharactersEscaped(value);

type Out = (line: string) => void;

async function create(db: DataSource, args: string[], out: Out): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      tenant: { type: 'string' },
      role: { type: 'string' },
      label: { type: 'string' },
      'new-tenant': { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const tenant = values.tenant;
  const newTenant = values['new-tenant'];
  const role = values.role as KeyRole | undefined;
  if (!role || !KEY_ROLES.includes(role)) throw new UsageError(`--role is required: one of ${KEY_ROLES.join(', ')}`);
  const label = labelOf(values.label);
  let created: { id: string; key: string };
  if (role === 'operator') {
    if (tenant !== undefined || newTenant) {
      throw new UsageError('an operator key belongs to no tenant: leave out --tenant and --new-tenant');
    }
    created = await createApiKey(db.manager, { tenantId: null, role, label });
  } else {
    if (!tenant || !/^[a-z0-9][a-z0-9_-]{0,62}$/.test(tenant)) {
      throw new UsageError('--tenant is required: lower-case letters, digits, "_" and "-" (at most 63)');
    }
    created = await db.transaction(async (tx) => {
      if (newTenant) {
        if (!(await createTenant(tx, tenant))) {
          throw new UsageError(
            `tenant "${tenant}" exists already: leave out --new-tenant to add a key to it (no key was made)`,
          );
        }
      } else {
        const known = await tenantExists(tx, tenant);
        if (!known.exists) {
          throw new UsageError(
            `no tenant "${tenant}" (${known.tenants} ${known.tenants === 1 ? 'tenant exists' : 'tenants exist'}; ` +
              'npm run keys -- list names them): check the name, ' +
              'or add --new-tenant to make it with its first key (no key was made)',
          );
        }
      }
      return createApiKey(tx, { tenantId: tenant, role: role as Role, label });
    });
  }
  if (values.json) {
    out(jsonLine({ id: created.id, tenant: tenant ?? null, role, label: label ?? null, key: created.key }));
    return;
  }
  out(
    `created ${created.id} (${role === 'operator' ? 'platform operator, no tenant' : `tenant ${tenant}`}, role ${role})`,
  );
  out('');
  out(`  ${created.key}`);
  out('');
  out('This is the only time the key is shown: store it now. Revoke with: npm run keys -- revoke ' + created.id);
}

async function list(db: DataSource, args: string[], out: Out): Promise<void> {
  const { values } = parseArgs({
    args,
    options: { tenant: { type: 'string' }, json: { type: 'boolean', default: false } },
    strict: true,
  });
  // The listing never carries the hash: nothing here can print it.
  const keys = await listApiKeys(db.manager, values.tenant ?? null);
  if (values.json) {
    out(jsonLine(keys.map(present)));
    return;
  }
  if (keys.length === 0) {
    out('no keys');
    return;
  }
  const table = [
    ['ID', 'TENANT', 'ROLE', 'PREFIX', 'STATE', 'CREATED', 'LABEL'],
    ...keys.map((k) => [
      k.id,
      k.tenant_id ?? '(platform)',
      k.role,
      `${k.key_prefix}…`,
      k.revoked_at ? `revoked ${new Date(k.revoked_at).toISOString()}` : 'active',
      new Date(k.created_at).toISOString(),
      shownLabel(k.label),
    ]),
  ];
  const widths = table[0].map((_, i) => Math.max(...table.map((r) => r[i].length)));
  for (const row of table)
    out(
      row
        .map((cell, i) => cell.padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    );
}

async function revoke(db: DataSource, args: string[], out: Out): Promise<void> {
  const { values, positionals } = parseArgs({
    args,
    options: { json: { type: 'boolean', default: false } },
    allowPositionals: true,
    strict: true,
  });
  const target = positionals[0];
  if (!target || positionals.length > 1) throw new UsageError('revoke takes exactly one key id or key prefix');
  const key = await activeKeyNamed(db, target);
  const revocation = await revokeApiKeyById(db.manager, key.id);
  // Another revocation of the key committed between the lookup above and this one (another operator's, at the same
  // moment): this one changed nothing, and says so with the time the key stopped working, as for a key already revoked.
  if (!revocation?.revokedHere) {
    const at = revocation ? ` at ${revocation.revokedAt.toISOString()}` : '';
    throw new UsageError(`${key.id} was revoked meanwhile${at}, by another revocation; nothing was changed`);
  }
  const revokedAt = revocation.revokedAt.toISOString();
  if (values.json) out(jsonLine({ ...present(key), revoked_at: revokedAt, revoked: true }));
  else
    out(
      `revoked ${key.id} (tenant ${key.tenant_id ?? '(platform)'}, role ${key.role}, prefix ${key.key_prefix}…) at ${revokedAt}`,
    );
}

/** The one active key a revoke or rotate names by id or prefix; a usage error when none or several match. */
async function activeKeyNamed(db: DataSource, target: string): Promise<KeyRow> {
  // A prefix is short and may be shared; acting by it is only allowed when it names exactly one active key.
  const matches = await findActiveKeysByIdOrPrefix(db.manager, target);
  if (matches.length === 0) throw new UsageError(`no active key has id or prefix "${shownArg(target)}"`);
  if (matches.length > 1) {
    throw new UsageError(
      `"${shownArg(target)}" matches ${matches.length} active keys; name it by id instead:\n` +
        matches.map((k) => `  ${k.id}  ${k.tenant_id ?? '(platform)'}  ${k.role}`).join('\n'),
    );
  }
  return matches[0];
}

/**
 * A new key for the old one's tenant, role and label, and the old one revoked, in one transaction: both or neither. A
 * revocation of the old key by someone else meanwhile undoes the new key (nothing changed; the operator is told).
 */
async function rotate(db: DataSource, args: string[], out: Out): Promise<void> {
  const { values } = parseArgs({
    args,
    options: { key: { type: 'string' }, json: { type: 'boolean', default: false } },
    strict: true,
  });
  if (!values.key) throw new UsageError('rotate takes --key <key id or key prefix>');
  const old = await activeKeyNamed(db, values.key);
  const owner = (
    old.tenant_id === null ? { tenantId: null, role: 'operator' } : { tenantId: old.tenant_id, role: old.role }
  ) as KeyOwner;
  const { created, revokedAt } = await db.transaction(async (tx) => {
    const made = await createApiKey(tx, { ...owner, label: old.label ?? undefined });
    const revocation = await revokeApiKeyById(tx, old.id);
    if (!revocation?.revokedHere) {
      const at = revocation ? ` at ${revocation.revokedAt.toISOString()}` : '';
      throw new UsageError(`${old.id} was revoked meanwhile${at}, by another revocation; no key was made`);
    }
    return { created: made, revokedAt: revocation.revokedAt.toISOString() };
  });
  if (values.json) {
    out(
      jsonLine({
        id: created.id,
        tenant: old.tenant_id,
        role: old.role,
        label: old.label,
        key: created.key,
        replaces: old.id,
        revoked_at: revokedAt,
      }),
    );
    return;
  }
  out(
    `created ${created.id} (${old.tenant_id === null ? 'platform operator, no tenant' : `tenant ${old.tenant_id}`}, role ${old.role})`,
  );
  out('');
  out(`  ${created.key}`);
  out('');
  out(`revoked ${old.id} (prefix ${old.key_prefix}…) at ${revokedAt}: it stopped working in every API process.`);
  out('This is the only time the new key is shown: store it now.');
}

function present(k: KeyRow) {
  return {
    id: k.id,
    tenant: k.tenant_id,
    role: k.role,
    prefix: k.key_prefix,
    label: k.label,
    created_at: new Date(k.created_at).toISOString(),
    revoked_at: k.revoked_at ? new Date(k.revoked_at).toISOString() : null,
  };
}

const COMMANDS: Record<string, (db: DataSource, args: string[], out: Out) => Promise<void>> = {
  create,
  list,
  revoke,
  rotate,
};

export async function main(argv: string[], out: Out = (line) => process.stdout.write(`${line}\n`)): Promise<number> {
  const [command, ...args] = argv;
  if (!command || command === 'help' || command === '--help' || command === '-h') {
    out(USAGE);
    return command ? 0 : 2;
  }
  const run = COMMANDS[command];
  if (!run) {
    process.stderr.write(`unknown command "${shownArg(command)}"\n\n${USAGE}\n`);
    return 2;
  }
  const config = loadConfig();
  // Every statement bounded as the apps' are: a row held by another session (a transaction left open) would otherwise
  // keep the command waiting for as long as it is held, saying nothing.
  const timeoutMs = config.DATABASE_QUERY_TIMEOUT_MS;
  const db = createDataSource(config.DATABASE_URL, 1, timeoutMs);
  await db.initialize();
  try {
    await run(db, args, out);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`${(error as Error).message}\n`);
      return 2;
    }
    if ((error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      // Node's message quotes the option as given (one line of text, here as everywhere).
      process.stderr.write(`${shownArg((error as Error).message)}\n`);
      return 2;
    }
    if (isStatementTimeout(error)) {
      process.stderr.write(
        `keys: the database did not answer within ${timeoutMs} ms (DATABASE_QUERY_TIMEOUT_MS): a row the command ` +
          'needs is held by another session, or Postgres is overloaded; no key was created or revoked (the statement ' +
          'was rolled back): run it again\n',
      );
      return TIMED_OUT_EXIT_CODE;
    }
    throw error;
  } finally {
    await db.destroy();
  }
}

/**
 * SIGTERM or SIGINT while a command runs: it finishes and prints its answer, then the process exits with its code. A
 * revocation or a new key cut short by the signal left the operator not knowing whether it took effect (a new key is
 * shown only once). A second signal stops it at once, exit 1, saying how to check.
 */
function finishOnSignal(): void {
  let asked = false;
  const handler = (signal: NodeJS.Signals) => {
    if (!asked) {
      asked = true;
      process.stderr.write(`keys: ${signal}: finishing the command under way (a second signal stops it at once)\n`);
      return;
    }
    process.stderr.write(
      `keys: ${signal}: stopped before the command finished; whether it took effect: npm run keys -- list\n`,
    );
    process.exit(1);
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}

if (require.main === module) {
  finishOnSignal();
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`keys: ${String((error as Error)?.message ?? error)}\n`);
      process.exit(1);
    },
  );
}
