# Shared by scripts/{kafka,apache-kafka,pg,s3,cassandra}-test-server.sh (the JVM
# ones also source lib/maven-server.sh): error exit, free loopback
# ports and finding a `cargo install`ed server. Source it after setting
# SERVER_NAME (the prefix of error messages).

die() {
    echo "$SERVER_NAME: $*" >&2
    exit 1
}

port_in_use() {
    # Bash's /dev/tcp connects: success means something listens there.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A free port at or above $1 (of the next 200) on 127.0.0.1.
free_port() {
    local port
    for ((port = $1; port < $1 + 200; port++)); do
        if ! port_in_use "$port"; then
            echo "$port"
            return 0
        fi
    done
    die "no free port in $1..$(($1 + 199)) on 127.0.0.1"
}

# The path of the program $1, from PATH or ~/.cargo/bin (where `cargo
# install` puts it even when that is not on PATH); fails when missing.
find_installed() {
    if command -v "$1" >/dev/null; then
        command -v "$1"
    elif [[ -x $HOME/.cargo/bin/$1 ]]; then
        echo "$HOME/.cargo/bin/$1"
    else
        return 1
    fi
}
