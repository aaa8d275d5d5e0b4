/* The built-in bitmap font used by the plots: printable ASCII (32..126), 5 pixels wide and 9 rows
 * tall (7 rows above the baseline, 2 below for descenders), one column of spacing. */
#ifndef ZY_FONT_H
#define ZY_FONT_H

#define FONT_W       5 /* glyph width in pixels */
#define FONT_H       9 /* glyph height in pixels, descenders included */
#define FONT_ADVANCE 6 /* horizontal distance between glyph origins */

/* 1 if pixel (col, row) of character c is ink (row 0 is the top); characters outside 32..126 draw
 * as '?'. */
int font_pixel(int c, int col, int row);

#endif
