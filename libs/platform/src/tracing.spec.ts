import {
  currentTraceparent,
  inTraceOf,
  outgoingUrlRecorded,
  redactedQuery,
  startTracing,
  traceFields,
  traceIdOf,
} from './tracing';

describe('tracing helpers', () => {
  it('read the trace id of a W3C traceparent, and nothing else', () => {
    expect(traceIdOf('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')).toBe(
      '4bf92f3577b34da6a3ce929d0e0e4736',
    );
    expect(traceIdOf(null)).toBeNull();
    expect(traceIdOf('')).toBeNull();
    expect(traceIdOf('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7')).toBeNull();
    expect(traceIdOf('00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01')).toBeNull();
  });

  it('do nothing with traces off: no SDK, no traceparent to store, no ids in log lines', () => {
    expect(startTracing('verity-test', {})).toBeNull();
    expect(startTracing('verity-test', { OTEL_TRACES_EXPORTER: 'none' })).toBeNull();
    expect(currentTraceparent()).toBeNull();
    expect(traceFields()).toEqual({});
    expect(inTraceOf('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', () => currentTraceparent())).toBeNull();
    expect(inTraceOf(null, () => 42)).toBe(42);
  });

  it('records that a request had a query, never what it held', () => {
    expect(redactedQuery('/v1/executions?api_key=vk_live_1&limit=2')).toBe('REDACTED');
    expect(redactedQuery('/v1/executions?vk_live_1')).toBe('REDACTED');
    expect(redactedQuery('/v1/executions?')).toBeUndefined();
    expect(redactedQuery('/v1/executions')).toBeUndefined();
    expect(redactedQuery(undefined)).toBeUndefined();
  });

  it('records where an outgoing call went, never its path or query', () => {
    expect(outgoingUrlRecorded({ protocol: 'https:', hostname: 'hooks.example.com', port: 443 })).toBe(
      'https://hooks.example.com:443/REDACTED',
    );
    expect(outgoingUrlRecorded({ protocol: 'http:', hostname: '::1', port: '8080' })).toBe(
      'http://[::1]:8080/REDACTED',
    );
    expect(outgoingUrlRecorded({ hostname: 'example.com' })).toBe('http://example.com/REDACTED');
  });
});
