#!/usr/bin/env bash
# Regenerates the JSON Schemas of the rules format (schemas/rules.schema.json) and of test
# files (schemas/rules-test.schema.json) from the Rust types (`ruleop schema`). A test
# fails when they are stale.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
cargo run --quiet -- schema >schemas/rules.schema.json
cargo run --quiet -- schema --tests >schemas/rules-test.schema.json
echo "regenerated schemas/rules.schema.json and schemas/rules-test.schema.json"
