/* A C program calling a gradient exported by diffdsl: the determinant of a 3x3 matrix and
 * its gradient (the cofactor matrix), with no diffdsl or Python at run time.
 *
 * Build and run:  make && ./det_grad
 * which runs:     diffdsl export ../det3.dd --grad --c .
 *                 cc -O2 -std=c99 -o det_grad main.c det3.c -lm
 */
#include <stdio.h>

#include "det3.h"

int main(void)
{
    const double A[9] = {2, 0, 1,
                         1, 3, 2,
                         1, 1, 2};
    double value, dA[9];
    if (det3_grad(A, &value, dA) != 0) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    printf("value: %.17g\n", value);
    printf("gradient:");
    for (int k = 0; k < 9; ++k)
        printf(" %.17g", dA[k]);
    printf("\n");

    /* A batch: two matrices, one row after another; results the same way. */
    const double B[2 * 9] = {2, 0, 1, 1, 3, 2, 1, 1, 2,
                             1, 0, 0, 0, 1, 0, 0, 0, 1};
    double values[2], dB[2 * 9];
    if (det3_grad_batch(2, B, values, dB) != 0)
        return 1;
    printf("batch values: %.17g %.17g\n", values[0], values[1]);
    return 0;
}
