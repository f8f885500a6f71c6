#!/usr/bin/env bash
# Installs Picard 3.4.0 and its dependencies (the oracle of the duplicate-
# marking tests, tests/markdup/) into .tools/picard/lib in the repository
# root, with Maven's `dependency:copy-dependencies` on a small generated pom.
# Idempotent: an existing complete install is left alone.
#
#   bash scripts/picard.sh            # install (needs mvn and java)
#   java -cp '.tools/picard/lib/*' picard.cmdline.PicardCommandLine MarkDuplicates ...
set -euo pipefail

PICARD_VERSION=3.4.0
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.tools/picard"
lib="$dest/lib"
stamp="$dest/installed-$PICARD_VERSION"

die() {
    echo "scripts/picard.sh: $*" >&2
    exit 1
}

command -v java >/dev/null 2>&1 ||
    die "java is not on PATH; Picard $PICARD_VERSION needs Java 17 or later (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
command -v mvn >/dev/null 2>&1 ||
    die "mvn (Apache Maven) is not on PATH; it fetches Picard and its dependencies (Debian/Ubuntu: apt-get install maven)"

if [[ -f "$stamp" ]] && compgen -G "$lib/picard-$PICARD_VERSION*.jar" >/dev/null; then
    echo "Picard $PICARD_VERSION already installed in $lib"
    exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/alnsort-picard.XXXXXX")"
trap 'rm -rf "$work"' EXIT

cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.alnsort</groupId>
  <artifactId>picard-install</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>com.github.broadinstitute</groupId>
      <artifactId>picard</artifactId>
      <version>$PICARD_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF

# Copy into a fresh directory and move it into place only when complete, so
# an interrupted run never leaves a half-filled lib/ that looks installed.
mvn -q -B -Dstyle.color=never -f "$work/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$work/lib" -DincludeScope=runtime ||
    die "mvn could not fetch Picard $PICARD_VERSION (is the Maven repository reachable?)"

compgen -G "$work/lib/picard-$PICARD_VERSION*.jar" >/dev/null ||
    die "mvn finished but no picard-$PICARD_VERSION jar was copied"

mkdir -p "$dest"
rm -rf "$lib"
mv "$work/lib" "$lib"
touch "$stamp"

java -cp "$lib/*" picard.cmdline.PicardCommandLine MarkDuplicates --version 2>&1 | head -n 1 || true
echo "Picard $PICARD_VERSION installed in $lib"
