// ESLint (flat config): the TypeScript recommended rules, the house
// conventions of JupyterLab extensions, and no formatting rules (prettier
// owns the layout: `jlpm prettier:check`).
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['lib/', 'node_modules/', 'coverage/', '**/*.js', '**/*.mjs'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  prettier,
  {
    files: ['src/**/*.{ts,tsx}', 'test/**/*.ts'],
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        { selector: 'interface', format: ['PascalCase'], custom: { regex: '^I[A-Z]', match: true } }
      ],
      '@typescript-eslint/no-unused-vars': ['error', { args: 'none' }],
      '@typescript-eslint/no-namespace': 'off',
      curly: ['error', 'all'],
      eqeqeq: ['error', 'smart'],
      'prefer-arrow-callback': 'error'
    }
  }
);
