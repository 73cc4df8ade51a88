/**
 * A failing cell's traceback split into frames, the notebook's own cell
 * frames first and library frames apart (the panel collapses those). Uses
 * the server's `frames` when the result has them, else IPython's traceback
 * text: a frame begins at a "Cell In[N], line L" / "File …" header line.
 */
import { stripAnsi } from './format';
import type { ICellResult } from './types';

export interface IFrame {
  kind: 'cell' | 'library';
  text: string;
}

export interface ISplitTraceback {
  /** the header line(s) before the first frame (the ----- ErrorName line) */
  head: string;
  cellFrames: IFrame[];
  libraryFrames: IFrame[];
  /** the final "ErrorName: message" lines after the last frame */
  tail: string;
}

const FRAME_HEAD = /^(?:Cell In\s*\[|File\s+|Input In\s*\[|\s*File "|<ipython-input-)/;
const USER_FRAME =
  /^(?:Cell In\s*\[|Input In\s*\[|<ipython-input-)|\/ipykernel_\d+\/|<ipython-input-/;

/** Whether a frame's text is the user's cell (not a library file). */
export function isCellFrame(text: string): boolean {
  const first = text.split('\n', 1)[0];
  return USER_FRAME.test(first);
}

export function splitTraceback(result: ICellResult | null | undefined): ISplitTraceback {
  const empty: ISplitTraceback = { head: '', cellFrames: [], libraryFrames: [], tail: '' };
  if (!result) {
    return empty;
  }
  if (Array.isArray(result.frames) && result.frames.length) {
    const frames = result.frames.map(f => ({
      kind: f.kind === 'cell' ? ('cell' as const) : ('library' as const),
      text: stripAnsi(f.text).replace(/\s+$/, '')
    }));
    const output = stripAnsi(result.output);
    const tail = lastErrorLines(output, result.errorName);
    return {
      head: '',
      cellFrames: frames.filter(f => f.kind === 'cell'),
      libraryFrames: frames.filter(f => f.kind === 'library'),
      tail
    };
  }
  const text = stripAnsi(result.output).replace(/\s+$/, '');
  if (!text) {
    return empty;
  }
  const lines = text.split('\n');
  const blocks: string[][] = [];
  const head: string[] = [];
  for (const line of lines) {
    if (FRAME_HEAD.test(line)) {
      blocks.push([line]);
    } else if (blocks.length) {
      blocks[blocks.length - 1].push(line);
    } else {
      head.push(line);
    }
  }
  if (!blocks.length) {
    return { ...empty, tail: text };
  }
  // the error lines ("ErrorName: message", maybe several lines) follow the last frame's code:
  // they start at the first line of the last block that is not indented and not a code line
  const last = blocks[blocks.length - 1];
  let tailStart = last.length;
  for (let i = 1; i < last.length; i++) {
    const l = last[i];
    if (l && !/^\s/.test(l) && !/^-*>?\s*\d+\s/.test(l) && !/^-+>/.test(l)) {
      tailStart = i;
      break;
    }
  }
  const tail = last.splice(tailStart).join('\n');
  const frames = blocks.map(b => {
    const t = b.join('\n').replace(/\s+$/, '');
    return { kind: isCellFrame(t) ? ('cell' as const) : ('library' as const), text: t };
  });
  return {
    head: head.join('\n').replace(/\s+$/, ''),
    cellFrames: frames.filter(f => f.kind === 'cell'),
    libraryFrames: frames.filter(f => f.kind === 'library'),
    tail
  };
}

function lastErrorLines(output: string, errorName: string | null | undefined): string {
  if (!output || !errorName) {
    return '';
  }
  const at = output.lastIndexOf(`${errorName}:`);
  return at >= 0 ? output.slice(at).replace(/\s+$/, '') : '';
}
