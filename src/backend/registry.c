/* Which backend serves a device type, and the loading of the CUDA backend
 * module (libojas-cuda.so, see backend/module.h).
 *
 * The CPU backend is part of libojas. The CUDA backend is loaded with
 * dlopen the first time a CUDA engine is created, from the first of:
 *   1. the file named by the environment variable OJAS_CUDA_MODULE (when
 *      set and not empty: only that file is tried);
 *   2. libojas-cuda.so in the directory of the file holding libojas's code
 *      (libojas.so, or the program itself when it linked libojas.a; found
 *      with dladdr);
 *   3. libojas-cuda.so in the install library directory (OJAS_INSTALL_LIBDIR,
 *      CMake's CMAKE_INSTALL_FULL_LIBDIR);
 *   4. libojas-cuda.so through the dynamic loader's own search
 *      (LD_LIBRARY_PATH, the ld.so cache, the default directories).
 * A file that exists but does not load (a CUDA library it needs is missing,
 * it is from another ojas build) ends the search with that reason. Once
 * loaded the module stays for the life of the process. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/module.h"

#ifndef OJAS_INSTALL_LIBDIR
#define OJAS_INSTALL_LIBDIR "/usr/local/lib"
#endif

static const oj_cuda_host g_host = {
    .abi = OJ_CUDA_MODULE_ABI,
    .size = sizeof(oj_cuda_host),
    .version = OJ_VERSION_STRING,
    .engine_size = sizeof(struct oj_engine),
    .tensor_size = sizeof(struct oj_tensor),
    .storage_size = sizeof(oj_storage),
    .backend_size = sizeof(oj_backend),
    .set_errorv = oj_set_errorv,
    .error_setv = oj__error_setv,
    .last_status = oj_last_status,
    .storage_new = oj__storage_new,
    .storage_release = oj__storage_release,
    .shape_fmt = oj__shape_fmt,
    .store = oj__store,
    .dtype_size = oj_dtype_size,
    .dtype_name = oj_dtype_name,
    .dtype_is_float = oj_dtype_is_float,
    .is_contiguous = oj_is_contiguous,
};

static pthread_mutex_t g_cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(const oj_backend *) g_cuda; /* NULL until the module is loaded */

const struct oj_backend *oj__backend_for(oj_device_type type) {
    switch (type) {
    case OJ_DEVICE_CPU: return &oj_cpu_backend;
    case OJ_DEVICE_CUDA: return atomic_load_explicit(&g_cuda, memory_order_acquire);
    }
    return NULL;
}

/* Check and initialise the module dlopened as h from path. OJ_OK with *out
 * set, else OJ_ERR_DEVICE naming path and the reason (h closed). */
static oj_status init_module(void *h, const char *path, const oj_backend **out, oj_error *err) {
    oj_cuda_module_init_fn init;
    /* POSIX's sanctioned conversion of dlsym's object pointer to a function pointer */
    *(void **)&init = dlsym(h, OJ_CUDA_MODULE_ENTRY);
    if (init == NULL) {
        dlclose(h);
        return oj_error_set(err, OJ_ERR_DEVICE,
                            "engine_create: %s is not an ojas CUDA backend module (it has no %s)",
                            path, OJ_CUDA_MODULE_ENTRY);
    }
    char msg[256] = "";
    const oj_backend *be = init(&g_host, msg, sizeof msg);
    if (be == NULL) {
        dlclose(h);
        return oj_error_set(err, OJ_ERR_DEVICE, "engine_create: the CUDA backend module %s: %s",
                            path, msg[0] ? msg : "refused to load");
    }
    *out = be;
    return OJ_OK;
}

/* dlopen path (a name with a slash), then init_module. */
static oj_status open_module(const char *path, const oj_backend **out, oj_error *err) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *why = dlerror();
        return oj_error_set(err, OJ_ERR_DEVICE,
                            "engine_create: the CUDA backend module %s cannot be loaded: %s", path,
                            why ? why : "unknown dlopen error");
    }
    return init_module(h, path, out, err);
}

/* Directory of the file holding this code (libojas.so, or the program that
 * linked libojas.a) into dir; false when it cannot be found. */
static bool self_dir(char *dir, size_t len) {
    Dl_info info;
    struct link_map *map = NULL;
    if (dladdr1((const void *)&oj__backend_for, &info, (void **)&map, RTLD_DL_LINKMAP) == 0)
        return false;
    const char *file = map && map->l_name && map->l_name[0] ? map->l_name : NULL;
    char exe[PATH_MAX];
    if (file == NULL) { /* the main program (libojas.a) */
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return false;
        exe[n] = '\0';
        file = exe;
    }
    char real[PATH_MAX]; /* l_name may be relative (a dlopen by relative path) */
    if (realpath(file, real) == NULL) return false;
    const char *slash = strrchr(real, '/');
    if (slash == NULL) return false;
    size_t n = (size_t)(slash - real);
    if (n == 0) n = 1; /* "/libojas.so" */
    if (n >= len) return false;
    memcpy(dir, real, n);
    dir[n] = '\0';
    return true;
}

/* Search for the module as the header comment says. */
static oj_status find_module(const oj_backend **out, oj_error *err) {
    const char *env = getenv("OJAS_CUDA_MODULE");
    if (env != NULL && env[0] != '\0') {
        if (access(env, F_OK) != 0)
            return oj_error_set(err, OJ_ERR_DEVICE,
                                "engine_create: OJAS_CUDA_MODULE names %s, which does not exist",
                                env);
        return open_module(env, out, err);
    }
    char dirs[2][PATH_MAX];
    int ndirs = 0;
    if (self_dir(dirs[0], sizeof dirs[0])) ndirs++;
    if (ndirs == 0 || strcmp(dirs[0], OJAS_INSTALL_LIBDIR) != 0)
        snprintf(dirs[ndirs++], sizeof dirs[0], "%s", OJAS_INSTALL_LIBDIR);
    for (int i = 0; i < ndirs; i++) {
        char path[PATH_MAX + sizeof OJ_CUDA_MODULE_FILE + 1];
        int n = snprintf(path, sizeof path, "%s/%s", dirs[i], OJ_CUDA_MODULE_FILE);
        if (n > 0 && (size_t)n < sizeof path && access(path, F_OK) == 0)
            return open_module(path, out, err);
    }
    /* the loader's own search: its "not found" names the module itself;
     * any other reason (a library the module needs) ends the search */
    void *h = dlopen(OJ_CUDA_MODULE_FILE, RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) return init_module(h, OJ_CUDA_MODULE_FILE, out, err);
    const char *why = dlerror();
    if (why != NULL && strncmp(why, OJ_CUDA_MODULE_FILE ":", strlen(OJ_CUDA_MODULE_FILE ":")) != 0)
        return oj_error_set(err, OJ_ERR_DEVICE,
                            "engine_create: the CUDA backend module %s cannot be loaded: %s",
                            OJ_CUDA_MODULE_FILE, why);
    return oj_error_set(err, OJ_ERR_DEVICE,
                        "engine_create: the CUDA backend module %s was not found (looked in %s%s%s "
                        "and the loader's search path; OJAS_CUDA_MODULE can name it); it is built "
                        "when libojas is configured with CUDA (-DOJAS_CUDA=ON or AUTO with nvcc)",
                        OJ_CUDA_MODULE_FILE, dirs[0], ndirs > 1 ? ", " : "",
                        ndirs > 1 ? dirs[1] : "");
}

oj_status oj__backend_load(oj_device_type type, const oj_backend **out, oj_error *err) {
    *out = NULL;
    if (type == OJ_DEVICE_CPU) {
        *out = &oj_cpu_backend;
        return OJ_OK;
    }
    if (type != OJ_DEVICE_CUDA)
        return oj_error_set(err, OJ_ERR_INVALID_ARGUMENT, "engine_create: unknown device type %d",
                            (int)type);
    const oj_backend *be = atomic_load_explicit(&g_cuda, memory_order_acquire);
    if (be != NULL) {
        *out = be;
        return OJ_OK;
    }
    pthread_mutex_lock(&g_cuda_lock);
    be = atomic_load_explicit(&g_cuda, memory_order_relaxed);
    oj_status st = OJ_OK;
    if (be == NULL) {
        st = find_module(&be, err);
        if (st == OJ_OK) atomic_store_explicit(&g_cuda, be, memory_order_release);
    }
    pthread_mutex_unlock(&g_cuda_lock);
    if (st == OJ_OK) *out = be;
    return st;
}
