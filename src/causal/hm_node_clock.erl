%% @doc Node clock: a compact set of dots, per replica a contiguous base plus a bitmap of
%% exceptions (the DottedDB paper §IV.B "The Node Clock").
%%
%% For replica `R' the entry `{Base, Bits}' stands for the counters
%% `{1..Base} ∪ {Base + 1 + I | bit I of Bits is set}'. The same structure serves three roles:
%% the node clock of DottedDB (every dot a node has seen), the causal context of a dotted causal
%% container ({@link hm_dcc}), and the "delivered" summary of a replica.
%%
%% Invariants (kept by every function here, checked by the properties in hm_causal_prop):
%% <ul>
%% <li>compaction: bit 0 of `Bits' is never set (it would extend the base);</li>
%% <li>no empty entries: `{0, 0}' is never stored;</li>
%% <li>so two clocks holding the same dots are the same term.</li>
%% </ul>
-module(hm_node_clock).

-export([new/0, add/2, add_dots/2, contains/2, base/1, base/2, max_counter/2, next_dot/2,
         join/2, missing/2, from_dots/1, to_dots/1, from_vv/1, is_empty/1, size/1,
         leq/2, strip_vv/2, close_gaps/3, encode/1, decode/1, replicas/1]).
-export_type([clock/0]).

-type replica() :: hm_vv:replica().
-type dot() :: hm_vv:dot().
-opaque clock() :: #{replica() => {non_neg_integer(), non_neg_integer()}}.

-define(MAGIC, "HNC").
-define(VERSION, 1).

%% @doc The empty clock.
-spec new() -> clock().
new() -> #{}.

%% @doc Add one dot (idempotent).
-spec add(dot(), clock()) -> clock().
add({R, C}, NC) when is_integer(C), C > 0 ->
    {Base, Bits} = maps:get(R, NC, {0, 0}),
    if C =< Base -> NC;
       true -> NC#{R => compact(Base, Bits bor (1 bsl (C - Base - 1)))}
    end.

%% @doc Add every dot of a list.
-spec add_dots([dot()], clock()) -> clock().
add_dots(Dots, NC) -> lists:foldl(fun add/2, NC, Dots).

%% Move leading set bits into the base.
compact(Base, 0) -> {Base, 0};
compact(Base, Bits) when Bits band 1 =:= 1 ->
    %% count trailing ones: Bits + 1 clears them and sets the next bit
    Ones = trailing_zeros(Bits + 1),
    {Base + Ones, Bits bsr Ones};
compact(Base, Bits) -> {Base, Bits}.

trailing_zeros(N) -> trailing_zeros(N, 0).
trailing_zeros(N, Acc) when N band 16#FFFFFFFF =:= 0 -> trailing_zeros(N bsr 32, Acc + 32);
trailing_zeros(N, Acc) when N band 1 =:= 0 -> trailing_zeros(N bsr 1, Acc + 1);
trailing_zeros(_, Acc) -> Acc.

%% @doc Whether the clock holds the dot.
-spec contains(dot(), clock()) -> boolean().
contains({_, C}, _) when not is_integer(C); C < 1 -> false;
contains({R, C}, NC) ->
    case NC of
        #{R := {Base, _}} when C =< Base -> true;
        #{R := {Base, Bits}} -> (Bits bsr (C - Base - 1)) band 1 =:= 1;
        _ -> false
    end.

%% @doc The contiguous part of every entry, as a version vector.
-spec base(clock()) -> hm_vv:vv().
base(NC) -> maps:fold(fun(_, {0, _}, Acc) -> Acc;
                         (R, {B, _}, Acc) -> Acc#{R => B}
                      end, #{}, NC).

%% @doc The contiguous base of one replica (DottedDB's `base(NC[n])').
-spec base(replica(), clock()) -> non_neg_integer().
base(R, NC) -> element(1, maps:get(R, NC, {0, 0})).

%% @doc The highest counter of `R' in the clock, 0 if none.
-spec max_counter(replica(), clock()) -> non_neg_integer().
max_counter(R, NC) ->
    case maps:get(R, NC, {0, 0}) of
        {Base, 0} -> Base;
        {Base, Bits} -> Base + bit_length(Bits)
    end.

bit_length(N) -> bit_length(N, 0).
bit_length(0, Acc) -> Acc;
bit_length(N, Acc) when N >= 1 bsl 32 -> bit_length(N bsr 32, Acc + 32);
bit_length(N, Acc) -> bit_length(N bsr 1, Acc + 1).

%% @doc A fresh dot for replica `R' (one past its highest counter) and the clock holding it.
-spec next_dot(replica(), clock()) -> {dot(), clock()}.
next_dot(R, NC) ->
    Dot = {R, max_counter(R, NC) + 1},
    {Dot, add(Dot, NC)}.

%% @doc Union of two clocks.
-spec join(clock(), clock()) -> clock().
join(A, B) when map_size(A) < map_size(B) -> join(B, A);
join(A, B) ->
    maps:fold(fun(R, EB, Acc) ->
                      case Acc of
                          #{R := EA} -> Acc#{R => join_entry(EA, EB)};
                          _ -> Acc#{R => EB}
                      end
              end, A, B).

join_entry({BA, MA}, {BB, MB}) ->
    Base = max(BA, BB),
    compact(Base, (MA bsr (Base - BA)) bor (MB bsr (Base - BB))).

%% @doc `A' is a subset of `B'.
-spec leq(clock(), clock()) -> boolean().
leq(A, B) -> join(A, B) =:= B.

%% @doc The dots `A' holds and `B' lacks (DottedDB anti-entropy: what `B' misses), sorted.
-spec missing(clock(), clock()) -> [dot()].
missing(A, B) ->
    lists:sort(
      maps:fold(fun(R, {BA, MA}, Acc) ->
                        {BB, MB} = maps:get(R, B, {0, 0}),
                        Max = max_counter(R, A),
                        [{R, C} || C <- lists:seq(BB + 1, max(BB, Max)),
                                   in_entry(C, BA, MA),
                                   not in_entry(C, BB, MB)] ++ Acc
                end, [], A)).

in_entry(C, Base, _) when C =< Base -> true;
in_entry(C, Base, Bits) -> (Bits bsr (C - Base - 1)) band 1 =:= 1.

%% @doc The clock of a list of dots.
-spec from_dots([dot()]) -> clock().
from_dots(Dots) -> add_dots(Dots, new()).

%% @doc Every dot of the clock, sorted. Linear in the number of dots: for tests and small clocks.
-spec to_dots(clock()) -> [dot()].
to_dots(NC) ->
    lists:sort(maps:fold(fun(R, {B, M}, Acc) ->
                                 [{R, C} || C <- lists:seq(1, B + bit_length(M)),
                                            in_entry(C, B, M)] ++ Acc
                         end, [], NC)).

%% @doc The clock of every dot a version vector covers.
-spec from_vv(hm_vv:vv()) -> clock().
from_vv(V) -> maps:map(fun(_, N) -> {N, 0} end, V).

%% @doc No dots at all.
-spec is_empty(clock()) -> boolean().
is_empty(NC) -> map_size(NC) =:= 0.

%% @doc Number of replica entries (the clock's metadata size, in entries).
-spec size(clock()) -> non_neg_integer().
size(NC) -> map_size(NC).

%% @doc Replicas with an entry.
-spec replicas(clock()) -> [replica()].
replicas(NC) -> lists:sort(maps:keys(NC)).

%% @doc DottedDB strip of a context against a node clock's bases: drop the entry of every
%% replica whose dots in `Ctx' all lie within `base(R, NC)' (the DottedDB paper, Algorithm 2 `strip').
-spec strip_vv(clock(), clock()) -> clock().
strip_vv(Ctx, NC) ->
    maps:filter(fun(R, _) -> max_counter(R, Ctx) > base(R, NC) end, Ctx).

%% @doc The clock, for replicas `Rs' only, of the dots `Of' holds and of every counter up to
%% `Of''s highest that `Mine' lacks. Used for a retired replica whose dots `Mine' holds all
%% of those any copy holds: what `Mine' lacks, nobody holds, so a context may name it.
-spec close_gaps([replica()], clock(), clock()) -> clock().
close_gaps(Rs, Of, Mine) ->
    maps:from_list(
      [{R, E} || R <- Rs, Max <- [max_counter(R, Of)], Max > 0,
                 E <- [begin
                           Mask = (1 bsl Max) - 1,
                           Set = set_of(R, Of) bor (bnot set_of(R, Mine) band Mask),
                           compact(0, Set)
                       end]]).

%% an entry as a bitset: bit C - 1 for counter C
set_of(R, NC) ->
    {Base, Bits} = maps:get(R, NC, {0, 0}),
    ((1 bsl Base) - 1) bor (Bits bsl Base).

%% @doc Compact binary encoding: magic, version, then per replica its id (external term format,
%% length-prefixed), base and bitmap as unsigned LEB128 varints.
-spec encode(clock()) -> binary().
encode(NC) ->
    Entries = [[varint(byte_size(IdBin)), IdBin, varint(B), varint(M)]
               || {R, {B, M}} <- lists:sort(maps:to_list(NC)),
                  IdBin <- [term_to_binary(R)]],
    iolist_to_binary([?MAGIC, ?VERSION, varint(map_size(NC)) | Entries]).

%% @doc Inverse of {@link encode/1}; `{error, bad_clock}' for anything it did not produce.
-spec decode(binary()) -> {ok, clock()} | {error, bad_clock}.
decode(Bin = <<?MAGIC, ?VERSION, Rest/binary>>) ->
    try
        {N, Rest1} = unvarint(Rest),
        {NC, <<>>} = decode_entries(N, Rest1, #{}),
        %% only the canonical encoding (sorted, minimal varints) is accepted
        Bin = encode(NC),
        {ok, NC}
    catch _:_ -> {error, bad_clock}
    end;
decode(_) -> {error, bad_clock}.

decode_entries(0, Rest, Acc) -> {Acc, Rest};
decode_entries(N, Bin, Acc) ->
    {Len, Bin1} = unvarint(Bin),
    <<IdBin:Len/binary, Bin2/binary>> = Bin1,
    R = binary_to_term(IdBin, [safe]),
    {B, Bin3} = unvarint(Bin2),
    {M, Bin4} = unvarint(Bin3),
    false = maps:is_key(R, Acc),
    %% only canonical entries: compacted, never empty
    true = (M band 1 =:= 0) andalso (B > 0 orelse M > 0),
    decode_entries(N - 1, Bin4, Acc#{R => {B, M}}).

varint(N) when N < 128 -> <<N>>;
varint(N) -> <<1:1, (N band 127):7, (varint(N bsr 7))/binary>>.

unvarint(Bin) -> unvarint(Bin, 0, 0).
unvarint(<<0:1, B:7, Rest/binary>>, Shift, Acc) -> {Acc bor (B bsl Shift), Rest};
unvarint(<<1:1, B:7, Rest/binary>>, Shift, Acc) -> unvarint(Rest, Shift + 7, Acc bor (B bsl Shift)).
