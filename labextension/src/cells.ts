/**
 * The one numbering people see: "Cell N" with N = the notebook cell index
 * (0-based over all cells, markdown included) + 1 — what JupyterLab's status
 * bar shows after Go to cell ("Cell N/M"). Machine fields (cellIndex,
 * failedCellIndex, diffs[].cellIndex) stay 0-based.
 */
export function cellNumber(index: number): number {
  return index + 1;
}

export function cellLabel(index: number, capital = true): string {
  return `${capital ? 'Cell' : 'cell'} ${cellNumber(index)}`;
}
