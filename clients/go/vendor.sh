#!/usr/bin/env sh
# Refresh vendor/ from Debian's packaged sources (golang-github-gomodule-redigo-dev,
# golang-github-mna-redisc-dev): the Go module proxy is out of reach, so the module builds
# from vendor/ (go 1.14+ uses it by default). tests/conformance/test_go_vendor.py checks
# that the copies match the installed packages.
set -eu
cd "$(dirname "$0")"
src=/usr/share/gocode/src/github.com
rm -rf vendor
mkdir -p vendor/github.com/gomodule/redigo/redis vendor/github.com/mna/redisc
for dir in gomodule/redigo/redis mna/redisc; do
  for file in "$src/$dir"/*.go; do
    case "$file" in *_test.go) ;; *) cp "$file" "vendor/github.com/$dir/" ;; esac
  done
done
cp /usr/share/doc/golang-github-gomodule-redigo-dev/copyright vendor/github.com/gomodule/redigo/COPYRIGHT
cp /usr/share/doc/golang-github-mna-redisc-dev/copyright vendor/github.com/mna/redisc/COPYRIGHT
cat > vendor/modules.txt <<'TXT'
# github.com/gomodule/redigo v1.8.3
## explicit; go 1.14
github.com/gomodule/redigo/redis
# github.com/mna/redisc v1.1.7
## explicit
github.com/mna/redisc
TXT
