#!/bin/sh
# install-config.sh -- meson install script: puts the sample configuration in place only where no
# file is yet, so `meson install` never overwrites an operator's configuration.
#   install-config.sh SAMPLE SYSCONFDIR_SUBDIR
set -eu
sample=$1
case $2 in
/*) dir="${DESTDIR:-}$2" ;;
*) dir="$MESON_INSTALL_DESTDIR_PREFIX/$2" ;;
esac
install -d -m 0755 "$dir"
target="$dir/$(basename "$sample")"
if [ -e "$target" ]; then
        echo "install-config: keeping $target (the sample was not copied over it)"
else
        install -m 0644 "$sample" "$target"
        echo "install-config: installed $target"
fi
