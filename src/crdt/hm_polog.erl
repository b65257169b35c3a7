%% @doc PO-log helpers shared by the pure op-based flavor of every type (the Hypermnesia paper, §4.6–4.7,
%% after Baquero, Almeida, Shoker "Pure operation-based replicated data types").
%%
%% A PO-log fragment is a map `#{Dot => Payload}'. Operations are delivered causally, so an
%% entry with dot `D' causally precedes a newly delivered operation with vector timestamp `Ts'
%% iff `Ts' contains `D'; otherwise the two are concurrent. Redundancy relations prune the
%% preceding entries ({@link concurrent/2}); causal stability folds a group of entries once all
%% their dots are stable ({@link all_stable/2}).
-module(hm_polog).

-export([concurrent/2, all_stable/2, put_group/3, reset_groups/2, group_timestamps/1,
         stabilize_groups/3]).

%% @doc The entries `Ts' has not seen: those concurrent with the operation stamped `Ts'. The
%% others causally precede it, which is what every type's redundancy relation prunes.
-spec concurrent(#{hm_vv:dot() => T}, hm_vv:vv()) -> #{hm_vv:dot() => T}.
concurrent(Entries, Ts) -> maps:filter(fun(D, _) -> not hm_vv:contains(D, Ts) end, Entries).

%% @doc Store a group's live entries in a log keyed by group (an element of a set), dropping
%% the group when none is left.
-spec put_group(K, #{hm_vv:dot() => T}, #{K => #{hm_vv:dot() => T}}) ->
          #{K => #{hm_vv:dot() => T}}.
put_group(K, Live, Log) when map_size(Live) =:= 0 -> maps:remove(K, Log);
put_group(K, Live, Log) -> Log#{K => Live}.

%% @doc Every group's entries that `Ts' has not seen (a map's `{remove, Key}': the reset of a
%% group-keyed log).
-spec reset_groups(hm_vv:vv(), #{K => #{hm_vv:dot() => T}}) -> #{K => #{hm_vv:dot() => T}}.
reset_groups(Ts, Log) ->
    maps:fold(fun(K, Entries, Acc) -> put_group(K, concurrent(Entries, Ts), Acc) end, Log, Log).

%% @doc Causal stability for a group-keyed log: a group whose entries are all stable leaves
%% the log, and joins the timestamp-free set `Seq' iff `Keep(Entries)' (the Hypermnesia paper, §4.7).
-spec stabilize_groups(hm_vv:vv(), {#{K => true}, #{K => map()}}, fun((map()) -> boolean())) ->
          {#{K => true}, #{K => map()}}.
stabilize_groups(V, {Seq, Log}, Keep) ->
    maps:fold(fun(K, Entries, {Seq1, Log1}) ->
                      case all_stable(Entries, V) of
                          true ->
                              Seq2 = case Keep(Entries) of
                                         true -> Seq1#{K => true};
                                         false -> Seq1
                                     end,
                              {Seq2, maps:remove(K, Log1)};
                          false -> {Seq1, Log1}
                      end
              end, {Seq, Log}, Log).

%% @doc How many timestamps a group-keyed log holds.
-spec group_timestamps(#{term() => map()}) -> non_neg_integer().
group_timestamps(Log) -> maps:fold(fun(_, Entries, N) -> N + map_size(Entries) end, 0, Log).

%% @doc Every entry's dot is in the stable vector `V' (vacuously true for no entries).
-spec all_stable(#{hm_vv:dot() => term()}, hm_vv:vv()) -> boolean().
all_stable(Entries, V) -> lists:all(fun(D) -> hm_vv:contains(D, V) end, maps:keys(Entries)).
