# syntax=docker/dockerfile:1
# One image for every Verity process; docker-compose.yml picks the process with `command`.

# --- deps: the full dependency tree (dev tools included) for the build -------------------------------------------
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund

# --- build: TypeScript → dist/ (tsc + tsc-alias, so path aliases become relative requires) ------------------------
FROM deps AS build
COPY tsconfig.json tsconfig.build.json nest-cli.json ./
COPY apps ./apps
COPY libs ./libs
COPY scripts ./scripts
RUN npm run build

# --- runtime: production dependencies and the compiled output only -------------------------------------------------
FROM node:24-bookworm-slim AS runtime
ENV NODE_ENV=production
# The workers' node flags (appNodeArgs in libs/platform/src/runtime.ts): every app stays under 200 MB RSS under load.
# The API's are its own (8 MB semi-spaces): docker-compose.yml sets them on the api and migrate services.
ENV NODE_OPTIONS="--max-old-space-size=128 --max-semi-space-size=16"
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
# Code and dependencies stay owned by root and read-only to the process: it runs as the image's unprivileged user.
USER node
EXPOSE 3000 4010 9101 9102
# The image's own command is the API: with its node flags (appNodeArgs('api')), which on the command line win over the
# workers' NODE_OPTIONS above. docker-compose.yml names each service's command (and the API's flags) itself.
CMD ["node", "--max-old-space-size=128", "--max-semi-space-size=8", "dist/apps/api/src/main.js"]
