// ESLint for the package, its tests and examples: typescript-eslint's strict, type-checked rules.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["build/", "dist/", "binding/", "npm/", "node_modules/", "eslint.config.js", "scripts/"] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
  },
  {
    // node:test's `test()` returns a promise the runner itself awaits.
    files: ["test/**/*.ts"],
    rules: { "@typescript-eslint/no-floating-promises": "off" },
  },
);
