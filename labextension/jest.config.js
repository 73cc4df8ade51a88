/**
 * Unit tests of the pure logic (timeline, panel state, formatting). Those
 * modules import nothing from JupyterLab, so no DOM and no mocks are needed.
 */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.spec.ts'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }]
  }
};
