//! C programs the symbol tests build: small, with known functions at known
//! depths, so that a test can say which names an address must resolve to.

/// `main` → `beta` → `alpha`, each a real (not inlined) function.
pub const ALPHA_BETA: &str = r#"
#include <stdio.h>
volatile long sink;
__attribute__((noinline)) void alpha(long n) { for (long i = 0; i < n; i++) sink += i; }
__attribute__((noinline)) void beta(long n) { for (long i = 0; i < n; i++) alpha(i); }
int main(int argc, char **argv) { (void)argv; beta(argc * 1000); printf("%ld\n", sink); return 0; }
"#;

/// [`ALPHA_BETA`] with `mix` inlined into `alpha`: built with `-O2 -g`,
/// some addresses of `alpha` resolve to the chain `alpha` → `mix`.
pub const ALPHA_BETA_INLINED: &str = r#"
#include <stdio.h>
volatile long sink;
static inline __attribute__((always_inline)) long mix(long x) { return (x * 2654435761L) ^ (x >> 7); }
__attribute__((noinline)) void alpha(long n) { for (long i = 0; i < n; i++) sink += mix(i); }
__attribute__((noinline)) void beta(long n) { for (long i = 0; i < n; i++) alpha(i); sink ^= n; }
int main(int argc, char **argv) { (void)argv; beta(argc * 1000); printf("%ld\n", sink); return 0; }
"#;
