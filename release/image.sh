#!/usr/bin/env bash
# Assembles ruleop's image from local files (no base image can be pulled here) and writes it
# as an OCI image archive (what `docker load`, `skopeo copy oci-archive:`, `ctr images
# import` and `kind load image-archive` read):
#   release/image.sh BINARY NAME:TAG OUT.tar [LABEL=VALUE ...]
# The image holds the binary at the Dockerfile's path, the libraries it links (by ldd, with
# the dynamic loader), /etc/passwd and /etc/group with `nonroot` (65532) as distroless has
# them, /home/nonroot and /tmp; nothing else. Its USER, ENTRYPOINT and CMD are the
# Dockerfile's final stage's own lines (read from it: the two cannot drift). The archive is
# written by tests/tools/ociarchive (go-containerregistry); no engine is needed. Files are
# dated SOURCE_DATE_EPOCH (default: the last commit's date), so the same binary gives the
# same digest. Used by `make release` (release/build.sh) and the image test (tests/image.rs).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: image.sh BINARY NAME:TAG OUT.tar [LABEL=VALUE ...]"
bin="${1:?$usage}"
name="${2:?$usage}"
out="${3:?$usage}"
shift 3
[ -x "$bin" ] || { echo "image.sh: $bin is not an executable" >&2; exit 1; }
epoch="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}"

# The final stage's USER, ENTRYPOINT and CMD (exec form: JSON arrays).
stage="$(awk '/^FROM /{s=""} {s=s $0 "\n"} END{printf "%s", s}' "$root/Dockerfile")"
user="$(sed -n 's/^USER  *//p' <<<"$stage")"
entrypoint="$(sed -n 's/^ENTRYPOINT  *//p' <<<"$stage")"
cmd="$(sed -n 's/^CMD  *//p' <<<"$stage")"
for v in user entrypoint cmd; do
  [ -n "${!v}" ] || { echo "image.sh: the Dockerfile's final stage has no ${v^^} line" >&2; exit 1; }
done

rootfs="$(mktemp -d)"
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$rootfs/files"
put() { mkdir -p "$rootfs/files$(dirname "$1")" && cp -L "$2" "$rootfs/files$1"; }
put /usr/local/bin/ruleop "$bin"
while read -r lib; do put "$lib" "$lib"; done < <(ldd "$bin" | grep -o '/[^ ]*' | sort -u)
mkdir -p "$rootfs/files/etc" "$rootfs/files/tmp" "$rootfs/files/home/nonroot"
chmod 1777 "$rootfs/files/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/files/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/files/etc/group"
tar -C "$rootfs/files" --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
  --exclude=./home/nonroot -cf "$rootfs/layer.tar" .
# /home/nonroot belongs to nonroot, as in distroless.
tar -C "$rootfs/files" --mtime="@$epoch" --owner=65532 --group=65532 --numeric-owner --no-recursion \
  -rf "$rootfs/layer.tar" ./home/nonroot

labels=()
for l in "$@"; do labels+=(-label "$l"); done
tool="$("$root/tests/tools/build.sh" ociarchive)"
"$tool" -layer "$rootfs/layer.tar" -name "$name" -out "$out" -created "$epoch" -arch "$(go env GOARCH)" \
  -user "$user" -entrypoint "$entrypoint" -cmd "$cmd" "${labels[@]}"
echo "$out"
