import pino, { Logger } from 'pino';

/** Structured JSON logs. API keys and secrets are redacted wherever they might appear. */
export function createLogger(app: string, level: string): Logger {
  return pino({
    level,
    base: { app },
    redact: {
      paths: [
        'authorization',
        'headers.authorization',
        'req.headers.authorization',
        '*.apiKey',
        '*.api_key',
        'apiKey',
        'secret',
        '*.secret',
        '*.secrets',
      ],
      censor: '[redacted]',
    },
  });
}

export type { Logger };
