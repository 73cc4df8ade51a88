/**
 * "Accept actual as golden" (pure): the golden notebook with one cell's
 * outputs replaced by the executed notebook's. Cells are compared by
 * position (compare.py), so cell `index` of both is the pair; only a pair of
 * code cells can be accepted (a missing or extra cell needs an edit).
 */
import type { ICellDiff } from './types';

type Notebook = { cells?: Array<Record<string, unknown>>; [k: string]: unknown };
type AnyNotebook = Record<string, unknown>;

export class AcceptError extends Error {}

/** Whether a golden diff can be accepted cell by cell. */
export function canAccept(diff: ICellDiff): boolean {
  return diff.diffType !== 'missing_cell' && diff.diffType !== 'extra_cell';
}

/**
 * A copy of `golden` where cell `index` carries the outputs (and execution
 * count) of the executed notebook's cell `index`. Throws AcceptError when the
 * pair is not two code cells.
 */
export function acceptCell(
  goldenIn: AnyNotebook,
  executedIn: AnyNotebook,
  index: number
): Notebook {
  const golden = goldenIn as Notebook;
  const executed = executedIn as Notebook;
  const g = golden.cells?.[index];
  const a = executed.cells?.[index];
  if (!g || g.cell_type !== 'code') {
    throw new AcceptError(`the golden notebook has no code cell ${index + 1}`);
  }
  if (!a || a.cell_type !== 'code') {
    throw new AcceptError(`the executed notebook has no code cell ${index + 1}`);
  }
  const outputs = JSON.parse(JSON.stringify(a.outputs ?? [])) as unknown[];
  const cells = [...(golden.cells ?? [])];
  cells[index] = { ...g, outputs, execution_count: a.execution_count ?? null };
  return { ...golden, cells };
}

/** A copy of `golden` where every cell of `indexes` carries the executed notebook's outputs. */
export function acceptCells(
  golden: AnyNotebook,
  executed: AnyNotebook,
  indexes: readonly number[]
): Notebook {
  let out = golden as Notebook;
  for (const index of indexes) {
    out = acceptCell(out, executed, index);
  }
  return out;
}
