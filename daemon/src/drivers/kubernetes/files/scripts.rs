//! The POSIX `sh` scripts the file calls run in the runner container
//! (`sh -c SCRIPT sandboxd-files ARGS…`), in its working directory, the
//! workspace. Paths come as `./a/b` (or `.`), checked relative by the
//! daemon. A script that refuses says one line on stderr,
//! `sandboxd-files: WORD [DETAIL]`, and exits 3 ([`REFUSED`]); the words
//! are read in [`super::told`]. Every tool a script needs is looked for
//! first (`missing TOOL`), so an image without it is told so by name.
//! Anything else that fails exits with the tool's own words on stderr.

/// The exit code of a script's refusal.
pub const REFUSED: i32 = 3;

/// `say WORD…` refuses; `need TOOL…` refuses when the image lacks one;
/// `there PATH` is whether anything (a dangling link too) is at PATH.
const PRELUDE: &str = r#"say() { printf 'sandboxd-files: %s\n' "$*" >&2; exit 3; }
need() { for tool do command -v "$tool" >/dev/null 2>&1 || say missing "$tool"; done; }
there() { [ -e "$1" ] || [ -L "$1" ]; }
"#;

/// `stat_file PATH`: `MODE(hex) SIZE MTIME` of PATH, its link not followed.
pub const STAT: &str = r#"need stat
there "$1" || say absent
exec stat -c '%f %s %Y' -- "$1"
"#;

/// `list_files DIR MAX`: per entry `MODE(hex) SIZE MTIME\n` then its name
/// and a NUL; `more\n` after MAX entries when there are more.
pub const LIST: &str = r#"need stat
there "$1" || say absent
[ -d "$1" ] || say notdir
cd -- "$1" 2>/dev/null && [ -r . ] || say denied
n=0
for f in .[!.]* ..?* *; do
  there "$f" || continue
  n=$((n + 1))
  if [ "$n" -gt "$2" ]; then echo more; exit 0; fi
  stat -c '%f %s %Y' -- "$f" || exit 4
  printf '%s\0' "$f"
done
"#;

/// `remove_file PATH RECURSIVE(0|1)`: a link is removed, never followed.
pub const REMOVE: &str = r#"there "$1" || say absent
if [ -d "$1" ] && [ ! -L "$1" ]; then
  if [ "$2" = 1 ]; then need rm; exec rm -rf -- "$1"; fi
  need ls rmdir
  [ -z "$(ls -A -- "$1")" ] || say notempty
  exec rmdir -- "$1"
fi
need rm
exec rm -f -- "$1"
"#;

/// The block `get_file` reads by (its offsets are in blocks of this).
pub const BLOCK: u64 = 64 * 1024;

/// `get_file PATH SKIP COUNT`: the file's size on one line, then COUNT
/// blocks of it from block SKIP.
pub const GET_FILE: &str = r#"need dd ls
there "$1" || say absent
[ -d "$1" ] && say isdir
[ -f "$1" ] || say notregular
[ -r "$1" ] || say denied
p=$1 skip=$2 count=$3
set -f
set -- $(ls -nLd -- "$p")
printf '%s\n' "$5"
dd if="$p" bs=65536 skip="$skip" count="$count" 2>/dev/null || say unreadable
"#;

/// `put_file PATH MODE(octal) SIZE`: stdin written beside PATH, its size
/// checked (a broken stream must not place half a file), then moved over
/// PATH (a link there is replaced, never written through).
pub const PUT_FILE: &str = r#"need cat wc chmod mv rm
d=${1%/*}
[ -d "$d" ] || say noparent
[ -w "$d" ] || say denied
[ -d "$1" ] && [ ! -L "$1" ] && say isdir
t=$d/.sandboxd-part-$$
trap 'rm -f -- "$t"' EXIT
cat > "$t" || exit 4
[ "$(($(wc -c < "$t")))" = "$3" ] || say short
chmod "$2" "$t" || exit 4
if [ -L "$1" ]; then rm -f -- "$1" || exit 4; fi
mv -f -- "$t" "$1" || exit 4
trap - EXIT
"#;

/// `put_tar DIR SIZE`: the checked archive on stdin kept whole in a hidden
/// staging directory in DIR, unpacked there by `tar` as the container's
/// user (owners not restored, modes kept), checked against what is in DIR
/// (a directory of the archive where a file, a link or nothing writable
/// is refuses all of it), then moved into place; the staging directory
/// goes in every case.
pub const PUT_TAR: &str = r#"need tar cat wc mkdir mv rm
there "$1" || say absent
[ -d "$1" ] || say notdir
[ -w "$1" ] || say denied
s=$1/.sandboxd-unpack-$$
mkdir -- "$s" || exit 4
trap 'rm -rf -- "$s"' EXIT
cat > "$s/a.tar" || exit 4
[ "$(($(wc -c < "$s/a.tar")))" = "$2" ] || say short
mkdir -- "$s/t" || exit 4
tar -xpof "$s/a.tar" -C "$s/t" || say untar
rm -f -- "$s/a.tar"
clash() {
  for e in "$1"/.[!.]* "$1"/..?* "$1"/*; do
    there "$e" || continue
    t=$2/${e##*/}
    there "$t" || continue
    if [ -d "$e" ] && [ ! -L "$e" ]; then
      [ -L "$t" ] && say conflict link "$t"
      [ -d "$t" ] || say conflict file "$t"
      [ -w "$t" ] || say conflict denied "$t"
      ( clash "$e" "$t" ) || exit 3
    elif [ -d "$t" ] && [ ! -L "$t" ]; then
      say conflict dir "$t"
    fi
  done
}
merge() {
  for e in "$1"/.[!.]* "$1"/..?* "$1"/*; do
    there "$e" || continue
    t=$2/${e##*/}
    if [ -d "$e" ] && [ ! -L "$e" ] && [ -d "$t" ] && [ ! -L "$t" ]; then
      ( merge "$e" "$t" ) || exit 4
    else
      if [ -L "$t" ]; then rm -f -- "$t" || exit 4; fi
      mv -f -- "$e" "$t" || exit 4
    fi
  done
}
clash "$s/t" "$1" || exit 3
merge "$s/t" "$1" || exit 4
"#;

/// `get_tar PATH`: a tar stream of PATH, named from its directory; of the
/// workspace (`.`), its entries with none for the workspace itself (an
/// empty one: an empty archive).
pub const GET_TAR: &str = r#"need tar
if [ "$1" = . ]; then
  set -- .[!.]* ..?* *
  for f do shift; if there "$f"; then set -- "$@" "$f"; fi; done
  if [ "$#" = 0 ]; then need dd; exec dd if=/dev/zero bs=1024 count=1 2>/dev/null; fi
  exec tar -cf - -- "$@"
fi
there "$1" || say absent
exec tar -cf - -C "${1%/*}" -- "${1##*/}"
"#;

/// `script` with the prelude its helpers are in.
pub fn with_prelude(script: &str) -> String {
    format!("{PRELUDE}{script}")
}
