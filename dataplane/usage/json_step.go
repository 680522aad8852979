package usage

// The states of JSON's scan that read keys, strings, literals and the
// containers below the tracked ones.

func (j *JSON) keyOrEnd(c byte) {
	switch {
	case isSpace(c):
	case c == '"':
		d := len(j.stack) // the object's depth: its keys are path[d-1]
		j.st, j.keyLen = sKey, 0
		j.keyMatch = j.top().ok && d <= len(j.path) && d > 0
	case c == '}':
		j.close(true)
	default:
		j.broken = true
	}
}

func (j *JSON) key(c byte) {
	if j.st == sKeyEsc {
		j.st = sKey
		return
	}
	switch c {
	case '\\':
		j.st, j.keyMatch = sKeyEsc, false
	case '"':
		seg := j.path[min(len(j.stack), len(j.path))-1]
		match := j.keyMatch && j.keyLen == len(seg)
		j.st = sColon
		// The value of a matching key is the target at the path's end;
		// short of it, a container whose keys continue the path.
		j.target = match && len(j.stack) == len(j.path)
		j.cont = match && len(j.stack) < len(j.path)
	default:
		if j.keyMatch {
			seg := j.path[len(j.stack)-1]
			j.keyMatch = j.keyLen < len(seg) && seg[j.keyLen] == c
			j.keyLen++
		}
	}
}

func (j *JSON) after(c byte) {
	switch {
	case isSpace(c):
	case c == ',':
		if j.top().object {
			j.st = sKeyOrEnd
		} else {
			j.st = sValue
		}
	case c == '}' || c == ']':
		j.close(c == '}')
	default:
		j.broken = true
	}
}

func (j *JSON) str(c byte) {
	switch {
	case j.st == sStringEsc:
		j.st = sString
	case c == '\\':
		j.st = sStringEsc
	case c == '"':
		j.afterValue()
	}
}

func (j *JSON) literal(c byte) {
	if isSpace(c) || c == ',' || c == '}' || c == ']' {
		j.endLiteral()
		if !isSpace(c) {
			j.step(c)
		}
		return
	}
	if len(j.num) < maxNumber {
		j.num = append(j.num, c)
	}
}

// endLiteral completes a number, true, false or null.
func (j *JSON) endLiteral() {
	if j.inNum {
		j.found, j.raw, j.inNum = true, string(j.num), false
	}
	j.afterValue()
}

// deepStep follows containers below the tracked ones: only strings and
// brackets matter there, as nothing in them can be at the path.
func (j *JSON) deepStep(c byte) {
	switch j.st {
	case sDeepEsc:
		j.st = sDeepString
	case sDeepString:
		switch c {
		case '\\':
			j.st = sDeepEsc
		case '"':
			j.st = sDeep
		}
	default:
		switch c {
		case '"':
			j.st = sDeepString
		case '{', '[':
			j.deep++
		case '}', ']':
			if j.deep--; j.deep == 0 {
				j.afterValue()
			}
		}
	}
}
