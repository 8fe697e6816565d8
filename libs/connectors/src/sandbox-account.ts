/**
 * The account header of the sandbox provider: its stand-in for the credentials a real provider scopes an account by.
 * Every request acts for the operation's tenant, so a tenant's reads see its own charges only — a reference another
 * tenant charged is not this tenant's effect and must never verify its operation. A module of its own: the tests'
 * stacks use it without loading the connector (zod, the platform's index).
 */
export const SANDBOX_ACCOUNT_HEADER = 'sandbox-account';
