/*
 * ntsetinfo.c: the Wine 8 limitation behind removeall/main.go, in C.
 *
 * Go's os.RemoveAll deletes with NtSetInformationFile and the information
 * class FileDispositionInformationEx (64) with POSIX semantics (Windows 10
 * 1607 and later). Wine 8.0 does not implement that class and answers
 * STATUS_NOT_IMPLEMENTED (0xC0000002); Windows answers STATUS_SUCCESS, and
 * an OS without the class STATUS_INVALID_INFO_CLASS (0xC0000003), which Go
 * handles by falling back. The old class, FileDispositionInformation (13),
 * works under Wine.
 *
 *   x86_64-w64-mingw32-gcc -O2 -o ntsetinfo.exe ntsetinfo.c -lntdll
 *   wine64 ntsetinfo.exe   # under Wine 8: "class 64: status 0xc0000002", exit 1
 */
#include <windows.h>
#include <winternl.h>
#include <stdio.h>

typedef struct { ULONG Flags; } DISPOSITION_EX;
typedef struct { BOOLEAN DeleteFile; } DISPOSITION;

NTSTATUS NTAPI NtSetInformationFile(HANDLE, PIO_STATUS_BLOCK, PVOID, ULONG, FILE_INFORMATION_CLASS);

static HANDLE create(const char *path)
{
	return CreateFileA(path, DELETE, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
			   NULL, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
}

int main(void)
{
	char dir[MAX_PATH], path[MAX_PATH];
	IO_STATUS_BLOCK io;
	GetTempPathA(sizeof dir, dir);
	snprintf(path, sizeof path, "%sntsetinfo-repro", dir);

	HANDLE h = create(path);
	if (h == INVALID_HANDLE_VALUE) {
		printf("CreateFile: error %lu\n", GetLastError());
		return 2;
	}
	/* FILE_DISPOSITION_DELETE | FILE_DISPOSITION_POSIX_SEMANTICS, as Go asks. */
	DISPOSITION_EX ex = { 0x1 | 0x2 };
	NTSTATUS st = NtSetInformationFile(h, &io, &ex, sizeof ex, (FILE_INFORMATION_CLASS)64);
	printf("class 64 (FileDispositionInformationEx): status 0x%08lx\n", (unsigned long)st);
	int failed = st != 0;
	if (failed) {
		DISPOSITION old = { TRUE };
		st = NtSetInformationFile(h, &io, &old, sizeof old, (FILE_INFORMATION_CLASS)13);
		printf("class 13 (FileDispositionInformation): status 0x%08lx\n", (unsigned long)st);
	}
	CloseHandle(h);
	printf("file still there afterwards: %s\n", GetFileAttributesA(path) == INVALID_FILE_ATTRIBUTES ? "no" : "yes");
	return failed;
}
