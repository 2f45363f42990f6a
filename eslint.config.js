// Lint with type information (typescript-eslint): the rules that need types are the ones that find
// bugs here, chiefly promises that are dropped or handed to something that ignores them.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/dist/',
      '**/node_modules/',
      'bench/results/',
      'test/artifacts/',
      'coverage/',
      '.scratch/',
      'release/',
    ],
  },
  {
    files: ['apps/*/src/**/*.ts', 'packages/*/src/**/*.ts', 'test/**/*.ts', 'bench/**/*.ts', 'scripts/**/*.ts'],
    extends: [js.configs.recommended, ...tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      // Each file is typed by its nearest tsconfig.json: the workspaces' own, test/ and bench/.
      parserOptions: { project: './tsconfig.eslint.json', tsconfigRootDir: import.meta.dirname },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // node:test's describe() and it() return promises that the runner itself awaits.
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['describe', 'it', 'test', 'suite'] },
          ],
        },
      ],
      '@typescript-eslint/no-misused-promises': 'error',
      // Express calls error handlers by their arity, so unused leading parameters stay, named _x.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', caughtErrors: 'none' }],
      // Turned off: an async fake or callback that satisfies a Promise-returning interface needs no
      // await, and the promise rules above already catch the mistakes that matter.
      '@typescript-eslint/require-await': 'off',
      // Turned off: it flags the initial value of a variable that a finally block reads when the try
      // throws early, and initial values that TypeScript's definite-assignment check asks for.
      'no-useless-assignment': 'off',
      // Turned off: our rethrows write a message for the operator that already quotes the caught
      // error; attaching it as cause would print its stack beside ours in the logs.
      'preserve-caught-error': 'off',
    },
  },
  {
    // Tests read JSON answers (typed any) and assert on them: the assertion is
    // the type check, so spelling each answer's type out first would add lines and catch nothing.
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
);
