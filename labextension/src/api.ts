/**
 * A thin typed client of the nbvalidation REST API. Jupyter's
 * ServerConnection adds authentication and the XSRF header.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { APIError } from './errors';
import type { IProjectSettings, PartialSpec } from './projectsettings';
import type {
  IBisection,
  IBuildLogChunk,
  IChanges,
  IEventList,
  IHealth,
  IJob,
  IJobList,
  IJobSpec,
  INotification,
  INotificationList,
  IValidationAPI
} from './types';

export { APIError };

export const API_PREFIX = 'nbvalidation/api/v1';

export class NBValidationAPI implements IValidationAPI {
  constructor(readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()) {}

  /** Absolute URL of an API path (path segments are URL-encoded). */
  url(parts: string[], query?: Record<string, string | number | undefined | null>): string {
    let url = URLExt.join(this.settings.baseUrl, API_PREFIX, ...parts.map(encodeURIComponent));
    const q = Object.entries(query ?? {})
      .filter(([, v]) => v !== undefined && v !== null && v !== '')
      .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`)
      .join('&');
    if (q) {
      url += `?${q}`;
    }
    return url;
  }

  async request(
    parts: string[],
    init: RequestInit = {},
    query?: Record<string, string | number | undefined | null>
  ): Promise<Response> {
    let response: Response;
    if (init.body !== undefined) {
      // the server takes a body only as declared JSON (a string body would go as text/plain)
      const headers = new Headers(init.headers);
      headers.set('Content-Type', 'application/json');
      init = { ...init, headers };
    }
    try {
      response = await ServerConnection.makeRequest(this.url(parts, query), init, this.settings);
    } catch (error) {
      throw new APIError(0, `Cannot reach the Jupyter server: ${String(error)}`);
    }
    if (!response.ok) {
      let message = `${response.status} ${response.statusText}`;
      let code: string | null = null;
      let field: string | null = null;
      try {
        const body = await response.json();
        const err = body?.error ?? body;
        message = err?.message || message;
        code = err?.code ?? null;
        field = err?.field ?? null;
      } catch {
        // not JSON: keep the status line
      }
      throw new APIError(response.status, message, code, field);
    }
    return response;
  }

  async json<T>(
    parts: string[],
    init: RequestInit = {},
    query?: Record<string, string | number | undefined | null>
  ): Promise<T> {
    const response = await this.request(parts, init, query);
    const text = await response.text();
    return (text ? JSON.parse(text) : {}) as T;
  }

  /** GET `parts` as JSON, or null when the server answers 404 (nothing there, or not on its backend). */
  private async jsonOrNull<T>(parts: string[]): Promise<T | null> {
    try {
      return await this.json<T>(parts);
    } catch (e) {
      if (e instanceof APIError && e.status === 404) {
        return null;
      }
      throw e;
    }
  }

  /**
   * The project settings that apply to `notebook` (GET project-settings), or null when this
   * server has no such route (an older server: the lab then keeps options in the browser).
   */
  async projectSettings(notebook: string): Promise<IProjectSettings | null> {
    try {
      return await this.json<IProjectSettings>(['project-settings'], {}, { notebook });
    } catch (e) {
      if (e instanceof APIError && e.status === 404 && !e.code) {
        return null;
      }
      throw e;
    }
  }

  /** Write (replace) `notebook`'s own entry in the project settings file (PUT project-settings). */
  saveProjectSettings(notebook: string, options: PartialSpec): Promise<IProjectSettings> {
    return this.json<IProjectSettings>(['project-settings'], {
      method: 'PUT',
      body: JSON.stringify({ notebook, options })
    });
  }

  health(): Promise<IHealth> {
    return this.json<IHealth>(['health']);
  }

  listJobs(notebook?: string | null, limit = 50): Promise<IJobList> {
    return this.json<IJobList>(['jobs'], {}, { notebook, limit });
  }

  getJob(name: string): Promise<IJob> {
    return this.json<IJob>(['jobs', name]);
  }

  createJob(spec: IJobSpec): Promise<IJob> {
    return this.json<IJob>(['jobs'], { method: 'POST', body: JSON.stringify(spec) });
  }

  async notifications(): Promise<INotificationList> {
    return this.json<INotificationList>(['notifications']);
  }

  async markNotificationSeen(name: string): Promise<INotification> {
    return this.json<INotification>(['notifications', name, 'seen'], {
      method: 'POST',
      body: '{}'
    });
  }

  async cancelJob(name: string): Promise<void> {
    // cancelOnly: a Cancel racing the job's end leaves the finished job in place (a plain DELETE removes it)
    await this.request(['jobs', name], { method: 'DELETE' }, { cancelOnly: 'true' });
  }

  events(name: string): Promise<IEventList> {
    return this.json<IEventList>(['jobs', name, 'events']);
  }

  executedNotebookUrl(name: string): string {
    return this.url(['jobs', name, 'notebook']);
  }

  buildLogUrl(name: string): string {
    return this.url(['jobs', name, 'buildlog']);
  }

  /**
   * The build log from byte `offset` (GET …/buildlog?offset=N), or null when
   * the job has no build log (404). Bytes are returned decoded; the caller
   * keeps a streaming TextDecoder across calls (see BuildLogFollower).
   */
  async buildLog(name: string, offset: number): Promise<IBuildLogChunk | null> {
    let response: Response;
    try {
      response = await this.request(['jobs', name, 'buildlog'], {}, offset ? { offset } : {});
    } catch (e) {
      if (e instanceof APIError && e.status === 404) {
        return null;
      }
      throw e;
    }
    const body = new Uint8Array(await response.arrayBuffer());
    const next = response.headers.get('X-Build-Log-Next-Offset');
    const complete = response.headers.get('X-Build-Log-Complete');
    return {
      text: '',
      raw: body,
      bytes: body.byteLength,
      nextOffset: next !== null && /^\d+$/.test(next) ? Number(next) : null,
      complete: complete === null ? null : complete.toLowerCase() === 'true'
    };
  }

  /**
   * What changed since the notebook's last success (GET …/changes), or null when
   * the server cannot say (404: a backend without environment records).
   */
  changes(name: string): Promise<IChanges | null> {
    return this.jsonOrNull<IChanges>(['jobs', name, 'changes']);
  }

  /** The exact pins of the job's environment, a requirements file (GET …/lock); a 404 says why there is none. */
  async lock(name: string): Promise<string> {
    const response = await this.request(['jobs', name, 'lock']);
    return response.text();
  }

  /** The server's search for the cause of a failed job, or null when none was started (404). */
  bisection(name: string): Promise<IBisection | null> {
    return this.jsonOrNull<IBisection>(['jobs', name, 'bisect']);
  }

  startBisection(name: string): Promise<IBisection> {
    return this.json<IBisection>(['jobs', name, 'bisect'], { method: 'POST', body: '{}' });
  }

  stopBisection(name: string): Promise<IBisection> {
    return this.json<IBisection>(['jobs', name, 'bisect'], { method: 'DELETE' });
  }

  /** The executed notebook JSON, or null while there is none (404). */
  executedNotebook(name: string): Promise<Record<string, unknown> | null> {
    return this.jsonOrNull<Record<string, unknown>>(['jobs', name, 'notebook']);
  }
}
