// Types of the failover addon (src/lib.rs). The first two functions have
// the original's (OpenClaw's) signatures and return shapes.

/** A reason the rules give: the original's names (`rate_limit`, `billing`, …). */
export type FailoverReason =
  | 'rate_limit'
  | 'overloaded'
  | 'billing'
  | 'auth'
  | 'auth_permanent'
  | 'timeout'
  | 'format'
  | 'model_not_found'
  | 'context_overflow'
  | 'session_expired'
  | 'empty_response'
  | 'no_error_details'
  | 'abort'
  | (string & {});

/**
 * The reason for an error message, or `null` when nothing in it decides
 * (the engine's `unclassified`). Throws when `message` is not a string
 * (null and undefined count as an empty message).
 */
export function classifyFailoverReason(
  message: string | null | undefined,
  options?: { provider?: string | null },
): FailoverReason | null;

/** What `resolveFailoverReasonFromError` reads of an error. */
export interface ErrorLike {
  /** An HTTP status, 100–599: a number or a string of digits; anything else throws. */
  status?: number | string | null;
  /** Read when `status` is absent. */
  statusCode?: number | string | null;
  message?: string | null;
  provider?: string | null;
  /** `RESOURCE_EXHAUSTED`, `insufficient_quota`, `ETIMEDOUT`, … */
  code?: string | null;
  /** `overloaded_error`, `ThrottlingException`, … */
  errorType?: string | null;
}

/**
 * The reason for an error (an `Error`, a plain object, or a message
 * string), or `null`. `providerHint` is used when the error names no
 * provider.
 */
export function resolveFailoverReasonFromError(
  err: ErrorLike | Error | string | null | undefined,
  providerHint?: string | null,
): FailoverReason | null;

/** One error, as `failover classify` takes a JSONL line; every field is optional. */
export interface ProviderError {
  message?: string | null;
  /** 100–599: a number or a string of digits; anything else throws. */
  status?: number | string | null;
  provider?: string | null;
  model?: string | null;
  code?: string | null;
  type?: string | null;
  /** The response body's text (a JSON body as its text). */
  body?: string | null;
}

/** The verdict: the fields of a `failover classify` output line. */
export interface Verdict {
  /** The reason; `unclassified` when nothing decided. */
  reason: FailoverReason | 'unclassified';
  /** The deciding rule's id; null when no rule decided. */
  rule: string | null;
  decided_by: 'rule' | 'weak rule' | 'model' | 'status rule' | 'none';
  /** Whether the reason continues the fallback. */
  failover: boolean;
  /** The evidence model's probability, when the model decided (three decimals, as the output line). */
  probability: number | null;
  /** The status used: given, from the body, or from the message text. */
  status: number | null;
  /** The message was longer than 1 MiB and was judged on its first 1 MiB. */
  truncated: boolean;
}

/** How a verdict was reached (`failover classify --explain`). */
export interface Explanation {
  verdict: Verdict;
  /** The literal strings (atoms) found in the message, in order. */
  atoms: string[];
  /** The readable account `failover classify --explain` prints. */
  text: string;
}

/** The whole verdict on one error, with the embedded rules and model. */
export function classify(error: ProviderError): Verdict;

/** How the embedded rules and model decide one error. */
export function explain(error: ProviderError): Explanation;

export interface EngineOptions {
  /** Directories of operator `.rules` files, highest priority first, over the defaults. */
  rules?: string[];
  /** Rules files held in memory: `[name, text]` pairs. */
  sources?: Array<[string, string]>;
  /** `false` leaves the embedded default rules out. */
  defaults?: boolean;
  /** `"embedded"` (the default), a model file from `failover model train`, or null for the rules alone. */
  model?: string | null;
  /** One probability (0–1) the model's top reason needs to decide, for every reason; default: per-reason thresholds from the cost of each mistake, as `failover classify`. */
  minConfidence?: number;
}

/**
 * A ruleset of its own. Throws when the rules cannot be used: the message
 * holds every diagnostic with its code and file:line:col.
 */
export class Engine {
  constructor(options?: EngineOptions);
  /** The reasons the rules declare, in declaration order. */
  get reasons(): string[];
  classify(error: ProviderError): Verdict;
  explain(error: ProviderError): Explanation;
  classifyFailoverReason(
    message: string | null | undefined,
    options?: { provider?: string | null },
  ): FailoverReason | null;
  resolveFailoverReasonFromError(
    err: ErrorLike | Error | string | null | undefined,
    providerHint?: string | null,
  ): FailoverReason | null;
}

/** One item of a labelled corpus file (`tests/field/*.yaml`). */
export interface CorpusItem {
  provider: string | null;
  model: string | null;
  status: number | null;
  code: string | null;
  type: string | null;
  message: string | null;
  body: string | null;
  /** The reason, or the defensible reasons, the SPEC gives the error. */
  expected: string[];
  line: number;
}

/** Reads a labelled corpus file with the library's own reader. */
export function readCorpus(path: string): CorpusItem[];
