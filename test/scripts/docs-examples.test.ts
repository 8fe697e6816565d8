import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type OpenApiDocument, ResponseValidator } from '../support/openapi-validator';

const ROOT = join(__dirname, '..', '..');
/** The document /docs-json serves: test/e2e/openapi.test.ts checks that the checked-in copy is exactly it. */
const DOCUMENT = JSON.parse(
  readFileSync(join(ROOT, 'libs', 'sdk', 'src', 'generated', 'openapi.json'), 'utf8'),
) as OpenApiDocument;
const DOCS = ['README.md', 'docs/api.md', 'docs/connectors.md', 'docs/contract.md', 'docs/operations.md'];

type Json = Record<string, unknown>;

interface Example {
  where: string;
  value: Json;
  /** The request it is sent as, when the docs say (`PUT /v1/…` above it, a curl's method and URL). */
  request?: { method: string; path: string };
}

/** Every ```json block of the docs (one value, or `METHOD /path` lines each followed by the body sent there). */
function jsonBlocks(): Example[] {
  return DOCS.flatMap((file) => {
    const text = readFileSync(join(ROOT, file), 'utf8');
    return [...text.matchAll(/^( *)```json\n([\s\S]*?)^\1```/gm)].flatMap((m) => {
      const where = `${file}:${text.slice(0, m.index).split('\n').length}`;
      const parts = m[2].split(/^ *(GET|PUT|POST|DELETE) (\/\S*)\n/m);
      if (parts.length === 1) return [{ where, value: JSON.parse(m[2]) as Json }];
      const examples: Example[] = [];
      for (let i = 1; i < parts.length; i += 3) {
        examples.push({
          where,
          value: JSON.parse(parts[i + 2]) as Json,
          request: { method: parts[i], path: parts[i + 1] },
        });
      }
      return examples;
    });
  });
}

/** Every curl to the API (localhost:3000) with a `-d` body; a shell variable spliced into the body becomes a value. */
function curls(): Example[] {
  return DOCS.flatMap((file) => {
    const text = readFileSync(join(ROOT, file), 'utf8');
    return [...text.matchAll(/curl [^`]*?-X (POST|PUT) localhost:3000(\/\S+)[^`]*? -d '((?:[^']|'"\$\w+"')*)'/g)].map(
      (m) => ({
        where: `${file}:${text.slice(0, m.index).split('\n').length}`,
        value: JSON.parse(m[3].replace(/'"\$\w+"'/g, 'order-1')) as Json,
        request: { method: m[1], path: m[2] },
      }),
    );
  });
}

/** What the docs show a value as, and how the document is asked about it. */
function check(validator: ResponseValidator, { value, request }: Example): string[] | 'not in the document' {
  const answer = (method: string, path: string, status: number, body: unknown, type = 'application/json') =>
    validator.check(method, path, status, new Headers({ 'content-type': type }), JSON.stringify(body));
  if (request) return validator.checkRequest(request.method, request.path, value);
  if (typeof value.type === 'string' && value.type.startsWith('https://verity.dev/problems/')) {
    return answer('POST', '/v1/executions', Number(value.status), value, 'application/problem+json');
  }
  if (typeof value.id === 'string' && value.id.startsWith('chg_')) {
    return answer('GET', '/v1/admin/changes', 200, { data: [value], next_cursor: null });
  }
  if ('agent_id' in value && 'operations' in value) return validator.checkRequest('POST', '/v1/executions', value);
  if ('key' in value && 'connector' in value && 'action' in value) {
    const submission = { agent_id: 'a', intent: 'i', operations: [value] };
    return validator.checkRequest('POST', '/v1/executions', submission);
  }
  if (('approval_rules' in value || 'obligation_owner' in value) && ('effective' in value || 'updated_at' in value)) {
    // What a GET answers (with its version as the ETag): its read-only members, refused in a PUT, say so.
    const headers = new Headers({ 'content-type': 'application/json', etag: '"1"' });
    return validator.check('GET', '/v1/admin/policy', 200, headers, JSON.stringify(value));
  }
  if ('approval_rules' in value || 'obligation_owner' in value) {
    return validator.checkRequest('PUT', '/v1/admin/policy', value);
  }
  if ('spending_caps' in value || 'allow_hosts' in value) {
    return validator.checkRequest('PUT', '/v1/admin/connector-settings/sandbox.payments', value);
  }
  // A webhook message ({ type: 'execution.finished', timestamp, data }) is sent by Verity, not answered by the API.
  if (typeof value.type === 'string' && /^[a-z_]+\.[a-z_]+$/.test(value.type) && 'data' in value) {
    return 'not in the document';
  }
  // An MCP client's configuration (which command runs verity-mcp) is the client's file, not the API's.
  if ('mcpServers' in value) return 'not in the document';
  return ['an example of nothing the test knows: teach check() what it is'];
}

describe('the examples in the docs', () => {
  const validator = new ResponseValidator(DOCUMENT);
  const examples = [...jsonBlocks(), ...curls()];

  it('are found (a change of the docs’ layout must not leave this test checking nothing)', () => {
    expect(examples.length).toBeGreaterThanOrEqual(12);
    expect(curls().length).toBeGreaterThanOrEqual(3);
  });

  it('are requests and answers the OpenAPI document accepts', () => {
    const wrong = examples.flatMap((example) => {
      const problems = check(validator, example);
      return problems === 'not in the document' ? [] : problems.map((p) => `${example.where}: ${p}`);
    });
    expect(wrong).toEqual([]);
  });

  it('would be refused with a made-up field', () => {
    const submission = examples.find((e) => 'agent_id' in e.value)!;
    const problems = check(validator, { ...submission, value: { ...submission.value, made_up_field: 1 } });
    expect(problems).not.toEqual([]);
  });
});
