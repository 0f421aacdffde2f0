/* Runs a SavedModel signature in TensorFlow's C runtime, with no Python in the process: the
 * loader and executor that tensorflow_model_server embeds (tools.c_runtime builds and drives
 * it; docs/serving/stock-model-server.md says what it shows).
 *
 *   saved_model_run ops OUT_FILE
 *       writes the OpList (tensorflow/core/framework/op_def.proto) of every op registered in
 *       this process: core TensorFlow, as linked from the installed wheel.
 *   saved_model_run run EXPORT_DIR INPUT_FILE OUTPUT...
 *       loads EXPORT_DIR with the "serve" tag, feeds the inputs INPUT_FILE names, fetches each
 *       OUTPUT ("operation:index") and prints them to standard output.
 *
 * INPUT_FILE holds one block per input:
 *   input OPERATION INDEX string N\n then N times: LENGTH\n BYTES\n   (a string vector [N])
 *   input OPERATION INDEX int32 VALUE\n                              (an int32 scalar)
 * Standard output holds one block per output, in the order asked:
 *   output K TYPE N\n then N values: strings as LENGTH\n BYTES\n, numbers one a line.
 * Any failure prints one line on standard error and exits with status 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tensorflow/c/tf_tstring.h"

#define MAX_TENSORS 16

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "saved_model_run: %s: %s\n", what, detail);
  exit(1);
}

static void check(TF_Status *status, const char *what) {
  if (TF_GetCode(status) != TF_OK) fail(what, TF_Message(status));
}

static TF_Output find_output(TF_Graph *graph, const char *name, int index) {
  TF_Operation *op = TF_GraphOperationByName(graph, name);
  if (op == NULL) fail("no such operation in the graph", name);
  TF_Output out = {op, index};
  return out;
}

static TF_Tensor *read_strings(FILE *in, long n) {
  int64_t dims[1] = {n};
  TF_Tensor *t = TF_AllocateTensor(TF_STRING, dims, 1, (size_t)n * sizeof(TF_TString));
  TF_TString *data = (TF_TString *)TF_TensorData(t);
  for (long i = 0; i < n; i++) {
    long len;
    if (fscanf(in, "%ld", &len) != 1 || len < 0 || fgetc(in) != '\n')
      fail("bad input file", "a string's length");
    char *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, in) != (size_t)len)
      fail("bad input file", "a string's bytes");
    TF_StringInit(&data[i]);
    TF_StringCopy(&data[i], buf, (size_t)len);
    free(buf);
  }
  return t;
}

static void print_tensor(int k, TF_Tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < TF_NumDims(t); d++) n *= TF_Dim(t, d);
  TF_DataType type = TF_TensorType(t);
  if (type == TF_STRING) {
    printf("output %d string %lld\n", k, (long long)n);
    const TF_TString *data = (const TF_TString *)TF_TensorData(t);
    for (int64_t i = 0; i < n; i++) {
      size_t len = TF_StringGetSize(&data[i]);
      printf("%zu\n", len);
      fwrite(TF_StringGetDataPointer(&data[i]), 1, len, stdout);
      putchar('\n');
    }
  } else if (type == TF_FLOAT) {
    printf("output %d float %lld\n", k, (long long)n);
    const float *data = (const float *)TF_TensorData(t);
    for (int64_t i = 0; i < n; i++) printf("%.9g\n", data[i]);
  } else if (type == TF_INT32) {
    printf("output %d int32 %lld\n", k, (long long)n);
    const int32_t *data = (const int32_t *)TF_TensorData(t);
    for (int64_t i = 0; i < n; i++) printf("%d\n", data[i]);
  } else {
    fail("unsupported output type", TF_DataTypeSize(type) ? "numeric" : "other");
  }
}

static int write_ops(const char *path) {
  TF_Buffer *ops = TF_GetAllOpList();
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(ops->data, 1, ops->length, f) != ops->length) fail("cannot write", path);
  fclose(f);
  TF_DeleteBuffer(ops);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "ops") == 0) return write_ops(argv[2]);
  if (argc < 5 || strcmp(argv[1], "run") != 0 || argc - 4 > MAX_TENSORS) {
    fprintf(stderr, "usage: saved_model_run ops OUT_FILE | run EXPORT_DIR INPUT_FILE OUTPUT...\n");
    return 2;
  }
  TF_Status *status = TF_NewStatus();
  TF_Graph *graph = TF_NewGraph();
  TF_SessionOptions *options = TF_NewSessionOptions();
  const char *tags[] = {"serve"};
  TF_Session *session =
      TF_LoadSessionFromSavedModel(options, NULL, argv[2], tags, 1, graph, NULL, status);
  check(status, "loading the SavedModel");

  FILE *in = fopen(argv[3], "rb");
  if (in == NULL) fail("cannot read", argv[3]);
  TF_Output inputs[MAX_TENSORS];
  TF_Tensor *values[MAX_TENSORS];
  int n_in = 0;
  char name[512], type[16];
  int index;
  long n;
  while (fscanf(in, " input %511s %d %15s %ld", name, &index, type, &n) == 4) {
    if (n_in == MAX_TENSORS) fail("bad input file", "too many inputs");
    inputs[n_in] = find_output(graph, name, index);
    if (strcmp(type, "string") == 0) {
      if (fgetc(in) != '\n') fail("bad input file", "a newline after the count");
      values[n_in++] = read_strings(in, n);
    } else if (strcmp(type, "int32") == 0) {
      values[n_in] = TF_AllocateTensor(TF_INT32, NULL, 0, sizeof(int32_t));
      *(int32_t *)TF_TensorData(values[n_in++]) = (int32_t)n;
    } else {
      fail("unsupported input type", type);
    }
  }
  fclose(in);

  int n_out = argc - 4;
  TF_Output outputs[MAX_TENSORS];
  TF_Tensor *results[MAX_TENSORS];
  for (int k = 0; k < n_out; k++) {
    char *colon = strrchr(argv[4 + k], ':');
    if (colon == NULL) fail("an output must be OPERATION:INDEX", argv[4 + k]);
    *colon = '\0';
    outputs[k] = find_output(graph, argv[4 + k], atoi(colon + 1));
  }
  TF_SessionRun(session, NULL, inputs, values, n_in, outputs, results, n_out, NULL, 0, NULL,
                status);
  check(status, "running the signature");
  for (int k = 0; k < n_out; k++) {
    print_tensor(k, results[k]);
    TF_DeleteTensor(results[k]);
  }
  for (int i = 0; i < n_in; i++) TF_DeleteTensor(values[i]);
  TF_CloseSession(session, status);
  TF_DeleteSession(session, status);
  TF_DeleteSessionOptions(options);
  TF_DeleteGraph(graph);
  TF_DeleteStatus(status);
  return 0;
}
