/*
 * replicator/api.h - RP_API, the mark on every public declaration (as libuv's UV_EXTERN).
 *
 * The libraries are compiled with hidden visibility (-fvisibility=hidden): a function is
 * exported from libreplicator.so (and libreplicator-extras.so, libreplicator-envs.so) only if
 * its declaration in these headers carries RP_API. Everything else the library's files share
 * stays inside the library, so the exported symbols are exactly the API (the `abi_symbols`
 * test checks it against these headers).
 *
 * RP_STATIC: define it when building or using the archives only (libreplicator.a); RP_API is
 * then empty. On ELF it changes nothing for a program that links the archive (the symbols are
 * resolved at link time either way); it keeps a shared library of your own, built from the
 * archive, from re-exporting replicator's API when the archive is compiled with it.
 */
#ifndef REPLICATOR_API_H
#define REPLICATOR_API_H

#if defined(RP_STATIC)
#define RP_API
#elif defined(__GNUC__) && __GNUC__ >= 4
#define RP_API __attribute__((visibility("default")))
#else
#define RP_API
#endif

#endif
