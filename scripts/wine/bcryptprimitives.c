/* A stand-in for Windows' bcryptprimitives.dll, for running the core's tests under Debian 12's
 * wine 8.0, which lacks it. Rust's std (1.78 and later) takes its random seeds from the DLL's
 * ProcessPrng; here it comes from RtlGenRandom (advapi32's SystemFunction036), which wine has.
 * Built and installed into the wine prefix by scripts/check_platforms.sh; never shipped. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk)) return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
