#!/usr/bin/env bash
# check.sh -- Builds the Debian package from this tree and checks it as an operator would meet it:
# lintian without errors, the file list, the conffile, the installed units through
# systemd-analyze verify, --check-config on the installed sample, the manual pages rendered
# without warnings, and `meson install` leaving an edited configuration alone. Installs into a
# throw-away root (dpkg -x); never runs systemd. Part of scripts/test.sh ("package check").
#
#   tests/package/check.sh [WORKDIR]      # default: a new temporary directory, removed after
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${1:-$(mktemp -d /tmp/outbox-relay-package.XXXXXX)}
[ $# -ge 1 ] || trap 'rm -rf "$work"' EXIT
checks=0 bad=0

ok() { checks=$((checks + 1)); echo "ok - $*"; }
no() { checks=$((checks + 1)); bad=$((bad + 1)); echo "FAILED - $*"; }
# check WHAT COMMAND...: one check, its output shown when it fails
check() {
        local what=$1 out
        shift
        if out=$("$@" 2>&1); then ok "$what"; else no "$what"; printf '%s\n' "$out" | sed 's/^/    /' | head -40; fi
}
done_() {
        echo "package check: $checks checks, $bad failed"
        [ "$bad" -eq 0 ]
        exit
}

# The tree as it is (committed or not), without build directories: dpkg-buildpackage writes
# next to the source, so it builds in a copy.
src="$work/outbox-relay"
rm -rf "$src" && mkdir -p "$src"
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
        (cd "$root" && git ls-files -co --exclude-standard | grep -v '^build/' | tar -cf - -T -) | tar -xf - -C "$src"
else
        (cd "$root" && tar --exclude=./build -cf - .) | tar -xf - -C "$src"
fi

echo "building the package (dpkg-buildpackage -b -us -uc; log: $work/build.log)"
if (cd "$src" && DEB_BUILD_OPTIONS="parallel=$(nproc)" dpkg-buildpackage -b -us -uc) >"$work/build.log" 2>&1; then
        ok "dpkg-buildpackage -b -us -uc"
else
        no "dpkg-buildpackage -b -us -uc"
        tail -n 30 "$work/build.log" | sed 's/^/    /'
        done_
fi
deb=$(ls "$work"/outbox-relay_*_*.deb | head -n 1)
echo "package: $(basename "$deb"), $(stat -c %s "$deb") bytes"

# lintian: no errors; warnings and the rest listed (README: each one left has a reason).
lintian --display-level '>=pedantic' "$work"/outbox-relay_*.changes >"$work/lintian.txt" 2>&1
grep -v '^running with root privileges' "$work/lintian.txt" | sed 's/^/    lintian: /'
errors=$(grep -c '^E:' "$work/lintian.txt")
warnings=$(grep -c '^W:' "$work/lintian.txt")
if [ "$errors" -eq 0 ]; then ok "lintian: 0 errors ($warnings warnings)"; else no "lintian: $errors errors"; fi

# Installed into a throw-away root.
inst="$work/root"
rm -rf "$inst" "$work/control"
dpkg -x "$deb" "$inst" && dpkg-deb -e "$deb" "$work/control"
want='/etc/outbox-relay/outbox-relay.conf
/lib/systemd/system/outbox-relay.service
/lib/systemd/system/outbox-relay@.service
/usr/sbin/outbox-relay
/usr/share/doc/outbox-relay/README.Debian
/usr/share/doc/outbox-relay/README.md.gz
/usr/share/doc/outbox-relay/changelog.gz
/usr/share/doc/outbox-relay/claim.md.gz
/usr/share/doc/outbox-relay/copyright
/usr/share/doc/outbox-relay/inbox.md.gz
/usr/share/doc/outbox-relay/metrics.md.gz
/usr/share/doc/outbox-relay/ordering.md.gz
/usr/share/doc/outbox-relay/systemd.md.gz
/usr/share/man/man5/outbox-relay.conf.5.gz
/usr/share/man/man8/outbox-relay.8.gz
/usr/share/outbox-relay/sql/001_outbox.sql
/usr/share/outbox-relay/sql/002_enqueue.sql
/usr/share/outbox-relay/sql/003_dead_letters.sql
/usr/share/outbox-relay/sql/004_claim_skip.sql
/usr/share/outbox-relay/sql/README.md
/usr/share/outbox-relay/sql/inbox.sql'
got=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' | sort)
check "file list: exactly the $(printf '%s\n' "$want" | wc -l) files expected" \
        diff -u <(printf '%s\n' "$want") <(printf '%s\n' "$got")
check "conffile: /etc/outbox-relay/outbox-relay.conf (and nothing else)" \
        diff -u <(echo /etc/outbox-relay/outbox-relay.conf) "$work/control/conffiles"
check "the installed binary runs from the root: --version" "$inst/usr/sbin/outbox-relay" --version
check "--check-config on the installed sample" \
        "$inst/usr/sbin/outbox-relay" --check-config -c "$inst/etc/outbox-relay/outbox-relay.conf"
# --print-sql carries exactly the installed migrations
print_sql_matches() {
        local out f
        out=$("$inst/usr/sbin/outbox-relay" --print-sql) || return 1
        for f in "$inst"/usr/share/outbox-relay/sql/0*.sql; do
                grep -qF -- "$(head -n 1 "$f")" <<<"$out" || { echo "--print-sql lacks $(basename "$f")"; return 1; }
                [ "$(grep -cF -- "$(sed -n 4p "$f")" <<<"$out")" -ge 1 ] || { echo "--print-sql differs from $f"; return 1; }
        done
        [ "$(wc -c <<<"$out")" -gt "$(cat "$inst"/usr/share/outbox-relay/sql/0*.sql | wc -c)" ]
}
check "--print-sql prints the installed migrations" print_sql_matches
check "the units in /lib/systemd/system say ExecStart=/usr/sbin/outbox-relay" \
        grep -q '^ExecStart=/usr/sbin/outbox-relay -c /etc/outbox-relay/outbox-relay.conf$' \
        "$inst/lib/systemd/system/outbox-relay.service"

# systemd-analyze verify --root: the root gets the host's own units (targets the relay's units
# name) and /bin/kill (ExecReload=), as a base system would have them; a parse warning counts
# as a failure, since verify itself only fails on some.
for f in /lib/systemd/system/*; do
        [ -e "$inst/lib/systemd/system/$(basename "$f")" ] || cp -a "$f" "$inst/lib/systemd/system/"
done
mkdir -p "$inst/bin" && cp /usr/bin/kill "$inst/bin/kill"
verify() {
        local out
        out=$(systemd-analyze verify --root="$inst" "$1" 2>&1) || { echo "$out"; return 1; }
        [ -z "$out" ] || { echo "$out"; return 1; }
}
check "systemd-analyze verify --root outbox-relay.service (no output)" verify outbox-relay.service
check "systemd-analyze verify --root outbox-relay@orders.service (no output)" verify outbox-relay@orders.service

# Manual pages: rendered with every groff warning on, nothing on stderr; lexgrog reads NAME.
render() {
        local err
        err=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$1" 2>&1 >/dev/null)
        [ -z "$err" ] || { echo "$err"; return 1; }
        lexgrog "$1"
}
for m in "$inst/usr/share/man/man8/outbox-relay.8.gz" "$inst/usr/share/man/man5/outbox-relay.conf.5.gz"; do
        check "man --warnings $(basename "$m"): no warnings, lexgrog reads its NAME" render "$m"
done
# (the kafka group is librdkafka's properties passed through: the page describes the group)
check "outbox-relay.conf(5) documents every key of the sample" bash -c '
        page=$(zcat "$1" | sed "s/\\\\-/-/g")
        group=""
        while IFS= read -r line; do
                case $line in
                kafka:) group="" ;;
                [a-z]*:) group=${line%:} ;;
                "        "[a-z]*" = "*) [ -n "$group" ] || continue; key=${line#        }; key=${key%% *}
                        grep -qF "$group.$key" <<<"$page" || { echo "no $group.$key"; exit 1; } ;;
                esac
        done <"$2"' _ "$inst/usr/share/man/man5/outbox-relay.conf.5.gz" "$inst/etc/outbox-relay/outbox-relay.conf"

# meson install into a fresh DESTDIR, the file edited, installed again: the edit stays.
obj=$(ls -d "$src"/obj-* 2>/dev/null | head -n 1)
keeps_config() {
        local d="$work/destdir" conf
        rm -rf "$d"
        meson install -C "$obj" --no-rebuild --destdir "$d" >/dev/null || return 1
        conf="$d/etc/outbox-relay/outbox-relay.conf"
        [ -f "$conf" ] || { echo "no $conf"; return 1; }
        echo "# edited by the operator" >>"$conf"
        meson install -C "$obj" --no-rebuild --destdir "$d" >/dev/null || return 1
        tail -n 1 "$conf" | grep -qx '# edited by the operator' || { echo "the edited file was replaced"; return 1; }
}
check "meson install twice: an edited /etc/outbox-relay/outbox-relay.conf is kept" keeps_config

done_
