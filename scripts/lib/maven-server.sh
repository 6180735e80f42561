# Shared by the test servers that run on the JVM from Maven Central
# (scripts/{cassandra,apache-kafka}-test-server.sh): the Java to run,
# fetching a server's runtime classpath, and stopping it. Source it after
# lib/test-server.sh, with SERVER_NAME, PRODUCT (its name in messages),
# VERSION, HOME_DIR and LIB (where the jars go) set.

now_ms() { date +%s%3N; }

# The java to run the server with: $JAVA_HOME's, else the one on PATH;
# it must be Java 17 or newer.
java_bin() {
    local java
    if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then
        java=$JAVA_HOME/bin/java
    else
        java=$(command -v java) || die "no java on PATH ($PRODUCT $VERSION needs Java 17 or newer: apt-get install openjdk-17-jre-headless)"
    fi
    local major
    major=$("$java" -XshowSettings:properties -version 2>&1 |
        sed -nE 's/^ *java\.specification\.version = ([0-9]+).*/\1/p')
    [[ -n $major && $major -ge 17 ]] ||
        die "$java is Java ${major:-?}; $PRODUCT $VERSION needs Java 17 or newer"
    echo "$java"
}

# Fetches $1:$2 at $VERSION (group and artifact) and its runtime
# dependencies, with the extra <dependency> elements $3, into $LIB, once:
# a marker file written last says the copy is whole. Prints $LIB.
maven_install() {
    local group=$1 artifact=$2 extra=${3:-}
    if [[ -f $LIB/.complete ]]; then
        echo "$LIB"
        return 0
    fi
    command -v mvn >/dev/null || die "mvn is not installed (apt-get install maven)"
    local started work
    started=$(now_ms)
    echo "$SERVER_NAME: fetching Apache $PRODUCT $VERSION from Maven Central into $LIB" >&2
    mkdir -p "$HOME_DIR" || die "could not create $HOME_DIR"
    rm -rf "$HOME_DIR"/fetch.* # what an earlier failed fetch left
    work=$(mktemp -d "$HOME_DIR/fetch.XXXXXX")
    cat >"$work/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/$SERVER_NAME.sh: $PRODUCT's runtime classpath. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kiln.test</groupId>
  <artifactId>$SERVER_NAME</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>$group</groupId>
      <artifactId>$artifact</artifactId>
      <version>$VERSION</version>
    </dependency>
$extra
  </dependencies>
</project>
POM
    if ! (cd "$work" && mvn -q -B dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$work/lib") >"$work/mvn.log" 2>&1; then
        tail -n 30 "$work/mvn.log" >&2
        die "mvn could not fetch $group:$artifact:$VERSION (whole log: $work/mvn.log)"
    fi
    [[ -f $work/lib/$artifact-$VERSION.jar ]] ||
        die "mvn ran but $artifact-$VERSION.jar is missing from $work/lib"
    rm -rf "$LIB"
    mv "$work/lib" "$LIB"
    rm -rf "$work"
    touch "$LIB/.complete"
    echo "$SERVER_NAME: installed $PRODUCT $VERSION ($(find "$LIB" -name '*.jar' | wc -l) jars) in $(($(now_ms) - started)) ms" >&2
    echo "$LIB"
}

# Waits up to $2 tenths of a second for process $1 to end.
wait_gone() {
    local i
    for ((i = 0; i < $2; i++)); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# Stops the server running in $DIR: SIGTERM runs its shutdown (a drain,
# a controlled shutdown), given 30 seconds, then it is killed.
cmd_stop() {
    [[ -d $DIR ]] || die "$DIR does not exist"
    if [[ -f $DIR/pid ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
        local pid
        pid=$(cat "$DIR/pid")
        kill "$pid"
        wait_gone "$pid" 300 || kill -9 "$pid" 2>/dev/null || true
        wait_gone "$pid" 50 || true
        rm -f "$DIR/pid"
    else
        echo "$SERVER_NAME: no $PRODUCT running in $DIR" >&2
    fi
}

# Prints the address of the server running in $DIR, as $1 prefixes it
# ("" or "kafka://").
print_url() {
    [[ -d $DIR ]] || die "$DIR does not exist"
    DIR=$(cd "$DIR" && pwd)
    is_running || die "no $PRODUCT running in $DIR (start it with: $0 start $DIR)"
    echo "${1}127.0.0.1:$(cat "$DIR/port")"
}
