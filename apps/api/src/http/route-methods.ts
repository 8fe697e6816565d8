import { Injectable, RequestMethod } from '@nestjs/common';
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { DECORATORS } from '@nestjs/swagger';
import { CONSOLE_ROUTE, consoleServes } from '../console';
import { DOCS_ROUTE, docsServes } from './docs-files';

/**
 * Pages mounted on express beside the controllers (main.ts): the review console and the OpenAPI document. GET only; a
 * controller's table does not know them, and another method there was answered 404 "no route", as if the page did not
 * exist. (Bull Board answers its own paths.)
 */
const MOUNTED_PAGES = [CONSOLE_ROUTE, '/docs', '/docs-json', '/docs-yaml'];

/**
 * Whether a GET of `path` is answered by one of the pages mounted beside the controllers, below their own path (the
 * console's pages, script and icon; the OpenAPI page and the Swagger UI files it loads): such a path takes GET and
 * HEAD too.
 */
function servedBelowMountedPage(path: string): boolean {
  if (path.startsWith(`${CONSOLE_ROUTE}/`)) return consoleServes(path.slice(CONSOLE_ROUTE.length));
  return path.startsWith(`${DOCS_ROUTE}/`) && docsServes(path.slice(DOCS_ROUTE.length));
}

interface Route {
  /** The path's segments as routed: a literal, or null for a parameter (`:id`), which matches any one segment. */
  segments: (string | null)[];
  methods: Set<string>;
}

/**
 * Which methods the API's routes answer at a path, read from the controllers' own route metadata (the table Nest
 * registers with express), so that a request no route takes can be told apart: a path no route has is 404, a path a
 * route has with another method is 405 with `Allow` (RFC 9110, 15.5.6) — a 404 there says the resource does not exist,
 * which for `DELETE /v1/executions/{id}` of a running execution is not true. Matched as express matches (strict and
 * case-sensitive routing, see main.ts): segment by segment, a parameter taking any one non-empty segment.
 */
@Injectable()
export class RouteMethods {
  private table: Route[] | undefined;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
  ) {}

  /** The methods routes answer at `path` (HEAD wherever GET is, as express answers it), or null when no route has it. */
  allowedAt(path: string): string[] | null {
    if (servedBelowMountedPage(path)) return ['GET', 'HEAD'];
    const segments = path === '/' ? [] : path.split('/').slice(1);
    const methods = new Set<string>();
    for (const route of this.routes()) {
      if (route.segments.length !== segments.length) continue;
      if (!route.segments.every((s, i) => (s === null ? segments[i] !== '' : s === segments[i]))) continue;
      for (const method of route.methods) methods.add(method);
    }
    if (methods.size === 0) return null;
    if (methods.has('GET')) methods.add('HEAD');
    return [...methods].sort();
  }

  /** Built on first use: every controller is registered by then, and the table never changes afterwards. */
  private routes(): Route[] {
    this.table ??= [
      ...MOUNTED_PAGES.map((page) => ({ segments: page.split('/').slice(1), methods: new Set(['GET']) })),
      ...this.controllerRoutes(),
    ];
    return this.table;
  }

  private controllerRoutes(): Route[] {
    return this.discovery.getControllers().flatMap(({ instance, metatype }) => {
      if (!instance || !metatype) return [];
      const prefixes = pathsOf(this.reflector.get<string | string[] | undefined>(PATH_METADATA, metatype));
      const prototype = Object.getPrototypeOf(instance) as object;
      return this.scanner.getAllMethodNames(prototype).flatMap((name) => {
        const handler = (prototype as Record<string, unknown>)[name] as (...args: unknown[]) => unknown;
        const method = this.reflector.get<RequestMethod | undefined>(METHOD_METADATA, handler);
        const paths = this.reflector.get<string | string[] | undefined>(PATH_METADATA, handler);
        if (method === undefined || paths === undefined) return [];
        // A handler left out of the document only refuses its method (GET /mcp: 405 of its own): not one the path takes.
        if (this.reflector.get<{ disable?: boolean } | undefined>(DECORATORS.API_EXCLUDE_ENDPOINT, handler)?.disable) {
          return [];
        }
        // A handler for every method (none today) leaves no method to refuse at its path.
        const verbs = method === RequestMethod.ALL ? [] : [RequestMethod[method]];
        return prefixes.flatMap((prefix) =>
          pathsOf(paths).map((path) => ({
            segments: `/${prefix}/${path}`
              .split('/')
              .filter((s) => s !== '')
              .map((s) => (s.startsWith(':') ? null : s)),
            methods: new Set(verbs),
          })),
        );
      });
    });
  }
}

function pathsOf(value: string | string[] | undefined): string[] {
  if (value === undefined) return [''];
  return Array.isArray(value) ? value : [value];
}
