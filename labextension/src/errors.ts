/** An error answer of the API: HTTP status plus `{"error": {code, message, field}}`. */
export class APIError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null = null,
    readonly field: string | null = null
  ) {
    super(message);
    this.name = 'APIError';
  }
}
