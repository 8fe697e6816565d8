/**
 * The few browser APIs the console uses, typed here because the project compiles against Node's libs only (adding
 * the DOM lib to the shared tsconfig would change timer and fetch types for every app). fetch, TextDecoder,
 * AbortController and timers come from the Node typings, which match the browser for what is used here.
 */
export interface BrowserEvent {
  readonly type: string;
  readonly target: unknown;
  readonly key: string;
  readonly button: number;
  readonly ctrlKey: boolean;
  readonly metaKey: boolean;
  readonly shiftKey: boolean;
  readonly altKey: boolean;
  readonly defaultPrevented: boolean;
  preventDefault(): void;
}

export type Listener = (event: BrowserEvent) => void;

export interface Elem {
  readonly tagName: string;
  id: string;
  className: string;
  textContent: string | null;
  hidden: boolean;
  value: string;
  checked: boolean;
  disabled: boolean;
  readonly dataset: Record<string, string | undefined>;
  readonly classList: {
    add(...tokens: string[]): void;
    remove(...tokens: string[]): void;
    contains(token: string): boolean;
  };
  readonly parentElement: Elem | null;
  readonly isConnected: boolean;
  append(...nodes: Array<Elem | string>): void;
  prepend(...nodes: Array<Elem | string>): void;
  replaceChildren(...nodes: Array<Elem | string>): void;
  replaceWith(...nodes: Array<Elem | string>): void;
  remove(): void;
  setAttribute(name: string, value: string): void;
  getAttribute(name: string): string | null;
  addEventListener(type: string, listener: Listener): void;
  querySelector(selectors: string): Elem | null;
  querySelectorAll(selectors: string): ArrayLike<Elem>;
  closest(selectors: string): Elem | null;
  contains(other: Elem | null): boolean;
  focus(options?: { preventScroll?: boolean }): void;
}

export interface BrowserDocument {
  title: string;
  readonly hidden: boolean;
  readonly body: Elem;
  readonly activeElement: Elem | null;
  getElementById(id: string): Elem | null;
  createElement(tag: string): Elem;
  addEventListener(type: string, listener: Listener): void;
}

export interface BrowserStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export interface BrowserWindow {
  readonly document: BrowserDocument;
  readonly sessionStorage: BrowserStorage;
  readonly location: {
    readonly pathname: string;
    readonly search: string;
    readonly hash: string;
    readonly origin: string;
  };
  readonly history: {
    pushState(data: unknown, unused: string, url: string): void;
    replaceState(data: unknown, unused: string, url: string): void;
  };
  addEventListener(type: string, listener: Listener): void;
  scrollTo(x: number, y: number): void;
}

declare const window: BrowserWindow;

export const win = window;
export const doc = window.document;
