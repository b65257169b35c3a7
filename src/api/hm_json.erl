%% @doc A small JSON encoder for the status page and the command-line tool's `--json'
%% output (RFC 8259), pure. OTP 25 has no JSON module, and Hypermnesia fetches no
%% dependencies.
%%
%% Terms map to JSON as a status report needs: maps to objects (keys: atoms and binaries as
%% they are, a tuple as its elements joined by `/', anything else as `~0p' prints it); lists
%% and tuples to arrays; binaries to strings; `true', `false' to themselves and `null',
%% `undefined' to `null'; other atoms to strings; integers and floats to numbers; anything
%% else (pids, references, funs) to the string `~0p' prints.
%%
%% Invariant: the output is valid JSON, UTF-8, with every control character escaped.
-module(hm_json).

-export([encode/1]).

%% @doc The JSON text of `Term', as iodata.
-spec encode(term()) -> iodata().
encode(true) -> <<"true">>;
encode(false) -> <<"false">>;
encode(null) -> <<"null">>;
encode(undefined) -> <<"null">>;
encode(A) when is_atom(A) -> string(atom_to_binary(A, utf8));
encode(B) when is_binary(B) -> string(B);
encode(I) when is_integer(I) -> integer_to_binary(I);
encode(F) when is_float(F) -> float_to_binary(F, [short]);
encode(L) when is_list(L) -> [$[, join([encode(E) || E <- L]), $]];
encode(T) when is_tuple(T) -> encode(tuple_to_list(T));
encode(M) when is_map(M) ->
    [${, join([[string(key(K)), $:, encode(V)] || {K, V} <- lists:sort(maps:to_list(M))]), $}];
encode(Other) -> string(iolist_to_binary(io_lib:format("~0p", [Other]))).

key(K) when is_atom(K) -> atom_to_binary(K, utf8);
key(K) when is_binary(K) -> K;
key(K) when is_tuple(K) ->
    iolist_to_binary(lists:join("/", [key(E) || E <- tuple_to_list(K)]));
key(K) when is_integer(K) -> integer_to_binary(K);
key(K) -> iolist_to_binary(io_lib:format("~0p", [K])).

join(Items) -> lists:join($,, Items).

string(B) -> [$", escape(B), $"].

escape(B) ->
    case unicode:characters_to_binary(B) of
        U when is_binary(U) -> [esc(C) || <<C/utf8>> <= U];
        _ -> [esc(C) || <<C>> <= B]              % not UTF-8: its bytes as Latin-1
    end.

esc($") -> <<"\\\"">>;
esc($\\) -> <<"\\\\">>;
esc($\n) -> <<"\\n">>;
esc($\r) -> <<"\\r">>;
esc($\t) -> <<"\\t">>;
esc(C) when C < 16#20 -> io_lib:format("\\u~4.16.0b", [C]);
esc(C) -> <<C/utf8>>.
