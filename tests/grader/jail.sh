# jail.sh — sourced by grade.sh and run-one.sh: the filesystem sandbox the student's code
# runs in (issue 20). Separate user ids keep tests apart; they do not hide files that are
# world-readable, such as an instructor's checkout (hidden tests, rubrics, solutions) or a
# folder of classmates' submissions. So every command that runs the student's code (or
# reads its files: unpacking, compiling, listing, testing) runs under bubblewrap (bwrap, a
# Debian package) in a private mount namespace whose root holds only the system (/usr, /etc,
# /sys, the /bin-/lib links, the GPU's /dev/nvidia* files where there is a GPU), a fresh
# /proc, /dev, /tmp, /dev/shm and /var/tmp, and the few
# paths of the grading that command needs, bound at their own paths. Nothing else of the
# machine exists in there. --unshare-pid: it cannot see (or signal) other processes, and
# when the command's process dies, everything it started dies with it.
#
#   jail_probe          sets JAIL_OK=1 when bwrap works here (root, or unprivileged user
#                       namespaces), else JAIL_OK=0 and JAIL_WHY to what went wrong
#   jail_cmd RW|RO PATH ... --   sets the array JAIL to the bwrap command line binding each
#                       PATH read-write (RW) or read-only (RO); append the command to it.
#                       With JAIL_OK=0 (or KN_GRADE_JAIL=0), JAIL is empty: no jail.
jail_probe() {
    JAIL_OK=0 JAIL_WHY=""
    if [ "${KN_GRADE_JAIL:-1}" = 0 ]; then JAIL_WHY="KN_GRADE_JAIL=0 was given"; return; fi
    if ! command -v bwrap > /dev/null; then JAIL_WHY="bwrap is not installed (apt-get install bubblewrap)"; return; fi
    JAIL_OK=1; jail_cmd --
    if ! JAIL_WHY=$("${JAIL[@]}" /bin/true 2>&1); then
        JAIL_OK=0 JAIL_WHY="bwrap cannot create a namespace here: $(head -c 200 <<< "$JAIL_WHY")"
    fi
}

jail_cmd() {
    JAIL=()
    if [ "${JAIL_OK:-1}" = 0 ] || [ "${KN_GRADE_JAIL:-1}" = 0 ]; then
        while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
        return
    fi
    JAIL=(bwrap --die-with-parent --unshare-pid --unshare-ipc --unshare-uts
          --ro-bind /usr /usr --ro-bind /etc /etc --proc /proc --dev /dev
          --perms 1777 --tmpfs /tmp --perms 1777 --tmpfs /dev/shm
          --dir /var --perms 1777 --tmpfs /var/tmp)
    # A GPU stays usable in there: its device files, and /sys (read-only) that CUDA reads.
    JAIL+=(--ro-bind-try /sys /sys)
    local d
    for d in /dev/nvidia*; do [ -e "$d" ] && JAIL+=(--dev-bind "$d" "$d"); done
    for d in /bin /sbin /lib /lib32 /lib64 /libx32; do
        if [ -L "$d" ]; then JAIL+=(--symlink "$(readlink "$d")" "$d")
        elif [ -d "$d" ]; then JAIL+=(--ro-bind "$d" "$d"); fi
    done
    # The folders on the way to each bound path: 0711 (bwrap would make them 0700, which a
    # dropped user id cannot cross), made once each, never over the mounts above.
    local made=" /tmp /var/tmp /dev/shm /usr /etc /proc /dev /var " a p
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        p=$2 a=""
        while [[ $p == /*/* ]]; do
            p=${p#/}; a=$a/${p%%/*}; p=/${p#*/}
            [[ $made == *" $a "* ]] || { JAIL+=(--perms 0711 --dir "$a"); made="$made$a "; }
        done
        case $1 in
            RW) JAIL+=(--bind "$2" "$2") ;;
            RO) JAIL+=(--ro-bind "$2" "$2") ;;
            *) echo "jail_cmd: RW or RO expected, got $1" >&2; return 1 ;;
        esac
        shift 2
    done
}
