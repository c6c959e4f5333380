// The fake provider's `quota` scenario (server.ts): the providers' real answers to an account out
// of credit, shared with the tests inside workerd that cannot import the node:http server.
// OpenAI: HTTP 429 {"error": {"type": "insufficient_quota", "code": "insufficient_quota", …}};
// Anthropic: HTTP 400 {"type": "error", "error": {"type": "invalid_request_error", …}}.

/** The error message of each API's out-of-credit answer, as the real APIs word it. */
export const QUOTA_MESSAGES = {
  openai:
    'You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.',
  anthropic: 'Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.',
} as const;
