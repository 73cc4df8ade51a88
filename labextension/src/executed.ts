/**
 * The executed notebook of a job, in a lab tab: a read-only contents drive
 * ("NBValidationExecuted:<job>/<notebook>.ipynb") serves it from
 * GET …/jobs/{name}/notebook, and a notebook widget factory that never starts
 * a kernel shows it with its outputs. Saving is refused; cells are read-only.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import type { IDocumentManager } from '@jupyterlab/docmanager';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { NotebookWidgetFactory } from '@jupyterlab/notebook';
import { Contents, ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';
import { basename } from './format';
import { executedFileName, executedPath, lockCells, lockFileName } from './nbfiles';
import { describe } from './model';
import type { IJob, IValidationAPI } from './types';

export const DRIVE_NAME = 'NBValidationExecuted';
export const FACTORY_NAME = 'Executed notebook (read-only)';

function readOnlyError(): Error {
  return new Error('An executed notebook of a validation is read-only.');
}

export class ExecutedNotebookDrive implements Contents.IDrive {
  constructor(
    readonly api: IValidationAPI,
    readonly serverSettings: ServerConnection.ISettings
  ) {}

  readonly name = DRIVE_NAME;

  get fileChanged(): ISignal<this, Contents.IChangedArgs> {
    return this._fileChanged;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    this._disposed = true;
    Signal.clearData(this);
  }

  async get(localPath: string, options?: Contents.IFetchOptions): Promise<Contents.IModel> {
    const parts = localPath.split('/').filter(Boolean);
    if (parts.length === 0) {
      return this._dir('', []);
    }
    const job = parts[0];
    if (parts.length === 1) {
      return this._dir(job, []);
    }
    const nb = await this.api.executedNotebook(job);
    if (!nb) {
      throw new Error(`Job ${job} has no executed notebook (yet).`);
    }
    const now = new Date().toISOString();
    return {
      name: parts[parts.length - 1],
      path: localPath,
      type: 'notebook',
      format: options?.content === false ? null : 'json',
      content: options?.content === false ? null : lockCells(nb),
      writable: false,
      created: now,
      last_modified: now,
      mimetype: 'application/x-ipynb+json',
      size: undefined
    };
  }

  async getDownloadUrl(localPath: string): Promise<string> {
    const job = localPath.split('/').filter(Boolean)[0] ?? '';
    return this.api.executedNotebookUrl(job);
  }

  async newUntitled(): Promise<Contents.IModel> {
    throw readOnlyError();
  }

  async delete(): Promise<void> {
    throw readOnlyError();
  }

  async rename(): Promise<Contents.IModel> {
    throw readOnlyError();
  }

  async save(): Promise<Contents.IModel> {
    throw readOnlyError();
  }

  async copy(): Promise<Contents.IModel> {
    throw readOnlyError();
  }

  async createCheckpoint(): Promise<Contents.ICheckpointModel> {
    // the lab asks for one on open; nothing is stored
    return { id: 'executed', last_modified: new Date().toISOString() };
  }

  async listCheckpoints(): Promise<Contents.ICheckpointModel[]> {
    return [];
  }

  async restoreCheckpoint(): Promise<void> {
    throw readOnlyError();
  }

  async deleteCheckpoint(): Promise<void> {
    throw readOnlyError();
  }

  private _dir(path: string, content: Contents.IModel[]): Contents.IModel {
    const now = new Date().toISOString();
    return {
      name: basename(path),
      path,
      type: 'directory',
      format: 'json',
      content,
      writable: false,
      created: now,
      last_modified: now,
      mimetype: ''
    };
  }

  private _disposed = false;
  private _fileChanged = new Signal<this, Contents.IChangedArgs>(this);
}

/**
 * Register the drive and a kernel-less, read-only notebook factory built
 * from the lab's own notebook factory (same renderers and content factory).
 */
export function setupExecutedNotebooks(
  app: JupyterFrontEnd,
  api: IValidationAPI,
  notebookFactory: NotebookWidgetFactory.IFactory | null
): boolean {
  const drive = new ExecutedNotebookDrive(api, app.serviceManager.serverSettings);
  app.serviceManager.contents.addDrive(drive);
  const base = notebookFactory as unknown as NotebookWidgetFactory | null;
  if (!base || !base.rendermime || !base.contentFactory || !base.mimeTypeService) {
    return false;
  }
  const factory = new NotebookWidgetFactory({
    name: FACTORY_NAME,
    label: FACTORY_NAME,
    fileTypes: ['notebook'],
    modelName: 'notebook',
    defaultFor: [],
    preferKernel: false,
    canStartKernel: false,
    shutdownOnClose: false,
    autoStartDefault: false,
    readOnly: true,
    rendermime: base.rendermime,
    contentFactory: base.contentFactory,
    mimeTypeService: base.mimeTypeService,
    editorConfig: base.editorConfig,
    notebookConfig: base.notebookConfig
  });
  app.docRegistry.addWidgetFactory(factory);
  factory.widgetCreated.connect((_, panel) => {
    panel.addClass('jp-NBValidation-executed');
    void panel.context.ready.then(() => makeReadOnly(panel, api));
  });
  return true;
}

/** "analysis.ipynb — validated 10:42" (the tab of a job's executed notebook). */
export function executedTabTitle(notebookPath: string, finished: number | null): string {
  const name = notebookPath.split('/').pop() || notebookPath;
  if (finished === null) {
    return `${name} — validation`;
  }
  const d = new Date(finished);
  const hm = `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
  return `${name} — validated ${hm}`;
}

/**
 * The tab names the job: a DocumentWidget renames its file when its label changes, so that
 * handler is disconnected first (the drive is read-only: nothing here is ever renamed).
 */
async function nameTab(panel: NotebookPanel, api: IValidationAPI, job: string): Promise<void> {
  let title: string;
  try {
    const j = await api.getJob(job);
    const end = j.status?.completionTime ?? j.metadata.creationTimestamp ?? null;
    title = executedTabTitle(j.spec.notebook.path, end ? Date.parse(end) : null);
  } catch {
    return; // the file name stays
  }
  const widget = panel as unknown as { _onTitleChanged?: (sender: unknown) => void };
  if (widget._onTitleChanged) {
    panel.title.changed.disconnect(widget._onTitleChanged, panel);
  }
  panel.title.label = title;
}

function makeReadOnly(panel: NotebookPanel, api: IValidationAPI): void {
  const notebook = panel.content;
  const apply = () => {
    for (const cell of notebook.widgets) {
      cell.readOnly = true;
    }
  };
  apply();
  notebook.model?.cells.changed.connect(apply);
  // (the label stays the file name: a DocumentWidget renames its file when the label changes)
  const job = panel.context.localPath.split('/')[0];
  void nameTab(panel, api, job);
  const ours = `Executed notebook of validation ${job} (read-only, no kernel)`;
  // the document manager writes its own caption (name, path, last saved) once it has
  // read the file, and again later: keep ours first, above what it says
  const caption = () => {
    const current = panel.title.caption;
    if (!current.startsWith(ours)) {
      panel.title.caption = current ? `${ours}\n${current}` : ours;
    }
  };
  caption();
  panel.title.changed.connect(caption);
}

/** Open a job's executed notebook in a tab. */
export async function openExecuted(
  docManager: IDocumentManager,
  job: IJob,
  haveFactory: boolean
): Promise<NotebookPanel | null> {
  const path = `${DRIVE_NAME}:${executedPath(job)}`;
  try {
    const widget = docManager.openOrReveal(
      path,
      haveFactory ? FACTORY_NAME : 'Notebook',
      undefined
    );
    if (!widget) {
      throw new Error(`cannot open ${path}`);
    }
    await widget.context.ready;
    return widget as unknown as NotebookPanel;
  } catch (e) {
    Notification.error(`Cannot open the executed notebook: ${describe(e)}`, { autoClose: 8000 });
    return null;
  }
}

/** Save `text` as a file named `fileName` (the browser's download). */
function saveAs(text: string, type: string, fileName: string): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = fileName;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** Download the exact pins of a job's environment as <notebook>.<job>.lock.txt. */
export async function downloadLock(api: IValidationAPI, job: IJob): Promise<void> {
  try {
    if (!api.lock) {
      throw new Error('this server cannot pin environments');
    }
    saveAs(await api.lock(job.metadata.name), 'text/plain', lockFileName(job));
  } catch (e) {
    Notification.error(`Cannot download the lock: ${describe(e)}`, { autoClose: 8000 });
  }
}

/** Download a job's executed notebook as <notebook>.executed.ipynb. */
export async function downloadExecuted(api: IValidationAPI, job: IJob): Promise<void> {
  try {
    const nb = await api.executedNotebook(job.metadata.name);
    if (!nb) {
      throw new Error('it has no executed notebook (yet)');
    }
    saveAs(JSON.stringify(nb, null, 1) + '\n', 'application/x-ipynb+json', executedFileName(job));
  } catch (e) {
    Notification.error(`Cannot download the executed notebook: ${describe(e)}`, {
      autoClose: 8000
    });
  }
}
