package main

import "strings"

// suggest returns the candidates nearest to name, when they are near
// enough to be a typo of it: at most a third of the longer word's letters
// differ (edit distance), or name is a prefix of them.
func suggest(name string, candidates []string) []string {
	name = strings.ToLower(strings.TrimLeft(name, "-"))
	if name == "" {
		return nil
	}
	best, out := -1, []string(nil)
	for _, c := range candidates {
		d := editDistance(name, c)
		if strings.HasPrefix(c, name) && len(name) >= 2 {
			d = 0
		}
		limit := max(len([]rune(name)), len([]rune(c))) / 3
		if limit < 1 {
			limit = 1
		}
		if d > limit {
			continue
		}
		switch {
		case best < 0 || d < best:
			best, out = d, []string{c}
		case d == best:
			out = append(out, c)
		}
	}
	return out
}

// editDistance is the Levenshtein distance of a and b, with a swap of two
// neighbours counting as one edit (optimal string alignment).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
