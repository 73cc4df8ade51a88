/** Small formatting helpers (pure). */

/** Parse an RFC 3339 time (micro- or nanosecond fractions allowed) to ms. */
export function parseTime(value: string | undefined | null): number | null {
  if (!value) {
    return null;
  }
  // Date.parse is only specified for millisecond fractions: trim longer ones.
  const trimmed = value.trim().replace(/(\.\d{3})\d+/, '$1');
  const t = Date.parse(trimmed);
  return Number.isNaN(t) ? null : t;
}

/** Same rules as jupyter_nbvalidation.core.model.format_duration. */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Number.isFinite(seconds) ? seconds : 0);
  if (s < 10) {
    return `${Number(s.toPrecision(3))}s`;
  }
  if (s < 60) {
    return `${Math.round(s)}s`;
  }
  const total = Math.round(s);
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const sec = total % 60;
  return (h ? `${h}h` : '') + (m || h ? `${m}m` : '') + `${sec}s`;
}

function pad(n: number, width = 2): string {
  return String(n).padStart(width, '0');
}

/** Local wall-clock time with milliseconds, e.g. `15:00:01.123`. */
export function formatClock(ms: number | null): string {
  if (ms === null) {
    return '';
  }
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** "12s ago", "3m ago", "2h ago", "4d ago". */
export function formatAgo(ms: number | null, now: number): string {
  if (ms === null) {
    return '';
  }
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) {
    return `${s}s ago`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)}m ago`;
  }
  if (s < 86400) {
    return `${Math.floor(s / 3600)}h ago`;
  }
  return `${Math.floor(s / 86400)}d ago`;
}

/** The last path segment. */
export function basename(path: string): string {
  const parts = path.split('/');
  return parts[parts.length - 1] || path;
}

// ESC [ ... final byte (CSI), ESC ] ... BEL or ESC \ (OSC), and lone
// two-byte escapes.
const ANSI_RE =
  // eslint-disable-next-line no-control-regex
  /\u001b\[[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)|\u001b[@-Z\\-_]/g;

/** Remove ANSI colour and cursor sequences (IPython tracebacks carry them). */
export function stripAnsi(text: string | null | undefined): string {
  return (text ?? '').replace(ANSI_RE, '');
}
