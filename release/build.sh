#!/usr/bin/env bash
# `make release`: the release artifacts of the version in Cargo.toml, in one folder
# (target/dist/<version>/, or $RULEOP_DIST):
#   ruleop-<v>-linux-<arch>.tar.gz   the binary (release build, debug info stripped), LICENSE
#                                    and README.md
#   ruleop-<v>.oci.tar               the image, an OCI image archive (release/image.sh),
#                                    named ruleop:<v> as the chart's default image is
#   ruleop-<chart version>.tgz       the packaged chart (helm package)
#   ruleop-<v>.cdx.json              the SBOM of the binary: CycloneDX 1.5, every crate it
#                                    is built from (cargo-cyclonedx)
#   RELEASE_NOTES.md                 CHANGELOG.md's section of the version
#   SHA256SUMS                       the checksums of all of the above (sha256sum -c)
# Tools are built or installed once into the cache: helm from its Go module, cargo-cyclonedx
# from crates.io. RULEOP_RELEASE_BINARY=PATH packages that binary instead of building one
# (the release test does, with the one cargo built for it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../tests/cluster/versions.sh
source "$root/tests/cluster/versions.sh"
cd "$root"
log() { printf '[release] %s\n' "$*" >&2; }
die() { printf '[release] %s\n' "$*" >&2; exit 1; }

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
[ -n "$version" ] || die "no version in Cargo.toml"
app_version="$(sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/ruleop/Chart.yaml)"
[ "$app_version" = "$version" ] ||
  die "charts/ruleop/Chart.yaml has appVersion $app_version, Cargo.toml $version: set appVersion to $version"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
[ -z "$(git status --porcelain 2>/dev/null)" ] || { commit="$commit-dirty"; log "the tree has uncommitted changes: the artifacts say $commit"; }
arch="$(go env GOARCH 2>/dev/null || uname -m)"
dist="${RULEOP_DIST:-$root/target/dist/$version}"
rm -rf "$dist" && mkdir -p "$dist"

# The release notes: CHANGELOG.md from `## <version>` to the next `## ` heading.
awk -v v="$version" '
  /^## / { if (on) exit; on = ($2 == v) }
  on { print }' CHANGELOG.md >"$dist/RELEASE_NOTES.md"
[ -s "$dist/RELEASE_NOTES.md" ] || die "CHANGELOG.md has no section \"## $version\": add one (its notes are the release's)"

bin="${RULEOP_RELEASE_BINARY:-}"
if [ -z "$bin" ]; then
  log "cargo build --release"
  cargo build --release --locked --quiet --bin ruleop
  bin="$root/target/release/ruleop"
fi
"$bin" --version | grep -q "^ruleop $version " || die "$bin says $("$bin" --version), not ruleop $version"

log "the binary"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/ruleop-$version"
# The release profile keeps line tables (for `make profile`); the shipped binary does not
# (its symbols stay: a panic's backtrace still names the functions).
cp "$bin" "$stage/ruleop-$version/ruleop"
strip --strip-debug "$stage/ruleop-$version/ruleop"
bin="$stage/ruleop-$version/ruleop"
cp LICENSE README.md "$stage/ruleop-$version/"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner -czf "$dist/ruleop-$version-linux-$arch.tar.gz" "ruleop-$version"

log "the image"
"$root/release/image.sh" "$bin" "ruleop:$version" "$dist/ruleop-$version.oci.tar" \
  "org.opencontainers.image.title=ruleop" \
  "org.opencontainers.image.version=$version" \
  "org.opencontainers.image.revision=$commit" \
  "org.opencontainers.image.licenses=$(sed -n 's/^license = "\(.*\)"$/\1/p' Cargo.toml)" >/dev/null

log "the chart"
helm="$("$root/tests/tools/build.sh" helm)"
"$helm" lint charts/ruleop >/dev/null || die "helm lint charts/ruleop fails"
"$helm" package charts/ruleop --destination "$dist" >/dev/null

log "the SBOM"
cdx="$("$root/tests/tools/cargo-tool.sh" cargo-cyclonedx 0.5.9)"
# Written beside Cargo.toml, then moved.
rm -f ./*.cdx.json
"$cdx" cyclonedx --format json --spec-version 1.5 --describe binaries -q
found="$(ls ./*.cdx.json 2>/dev/null | head -1 || true)"
[ -n "$found" ] || die "cargo-cyclonedx wrote no SBOM"
mv "$found" "$dist/ruleop-$version.cdx.json"

(cd "$dist" && sha256sum -- * >SHA256SUMS)
log "artifacts of ruleop $version ($commit) in $dist:"
(cd "$dist" && ls -l) >&2
