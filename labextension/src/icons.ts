import { LabIcon } from '@jupyterlab/ui-components';

// A clipboard with a check mark; jp-icon3 follows the theme's icon colour.
const validateSvg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M19 3h-4.18C14.4 1.84 13.3 1 12 1s-2.4.84-2.82 2H5c-1.1 0-2 .9-2 2v14c0 1.1.9 2 2 2h14c1.1 0 2-.9 2-2V5c0-1.1-.9-2-2-2zm-7 0c.55 0 1 .45 1 1s-.45 1-1 1-1-.45-1-1 .45-1 1-1zm7 16H5V5h2v3h10V5h2v14z"/>
    <path d="M10.5 17.2l-3.7-3.7 1.4-1.4 2.3 2.3 5.3-5.3 1.4 1.4z"/>
  </g>
</svg>`;

export const validateIcon = new LabIcon({
  name: 'jupyter-nbvalidation:validate',
  svgstr: validateSvg
});
