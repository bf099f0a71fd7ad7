/*
 * bcryptprimitives.dll shim for running Go test binaries under Wine 8.
 *
 * Why it exists: since Go 1.24 the Windows runtime takes its random bytes
 * from ProcessPrng in bcryptprimitives.dll, and refuses to start without it.
 * Wine 8.0 (Debian bookworm's wine64) ships no bcryptprimitives.dll, so every
 * Go >= 1.24 binary dies at start-up under it. This DLL exports ProcessPrng
 * and fills the buffer from advapi32's SystemFunction036 (RtlGenRandom),
 * which Wine does implement. It is for CI under Wine only: real Windows has
 * the real DLL, and nothing here is shipped.
 *
 * Built by .ci/windows/run.sh with Debian's gcc-mingw-w64-x86-64-win32:
 *   x86_64-w64-mingw32-gcc -shared -O2 -s -o bcryptprimitives.dll \
 *       bcryptprimitives.c -ladvapi32
 */
#include <windows.h>

/* RtlGenRandom's real export name; advapi32 exports it, no header declares it. */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

/*
 * ProcessPrng fills data with size random bytes and returns TRUE, as the
 * Windows one does (it is documented never to fail). RtlGenRandom takes a
 * ULONG length, so a larger request is filled in pieces.
 */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T size)
{
	while (size > 0) {
		ULONG n = size > 0x40000000 ? 0x40000000 : (ULONG)size;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		size -= n;
	}
	return TRUE;
}
