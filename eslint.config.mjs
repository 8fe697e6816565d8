import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      '**/dist/**',
      'coverage/**',
      'node_modules/**',
      '.verity/**',
      'test-artifacts/**',
      '**/*.mjs',
      '**/*.cjs',
      '**/*.js',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
    },
  },
  {
    // SQL has one home, libs/persistence: an app calls its repositories and never sends a statement itself.
    files: ['apps/**/*.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: 'CallExpression[callee.property.name=/^(query|createQueryBuilder|getRepository)$/]',
          message: 'SQL lives in libs/persistence: call (or add) a repository function there.',
        },
      ],
      'no-restricted-imports': [
        'error',
        {
          paths: [
            { name: '@verity/persistence', importNames: ['rows'], message: 'SQL lives in libs/persistence.' },
            { name: 'typeorm', importNames: ['In', 'SelectQueryBuilder'], message: 'SQL lives in libs/persistence.' },
          ],
          patterns: [
            {
              regex: '^\\.{1,2}/(.*/)?client/',
              message: 'console/client is browser code, bundled by esbuild: the server never imports it.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['libs/status-model/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: ['@nestjs/*', 'typeorm', 'bullmq', 'ioredis', 'pg', '@verity/*', 'node:*'] },
      ],
    },
  },
);
